"""warpgauge's C launcher (``kernels/_clauncher``) against Triton's on a GPU.

``bitwise``: every operator's public call at a few shapes (each plan kind: the host suite's
shapes, a looped softmax, an unaligned GEMM on the pointer kernel, INT4 GEMV/tensor-core/tiled
paths with split-K), four calls each (first launch, recorded call, two replays), once with
``_launch.C_LAUNCH`` off and once on (caches cleared between), outputs NaN-poisoned (run it with
``WARPGAUGE_POISON_OUTPUTS=1``): the outputs must be bitwise identical, NaN-free, and the C
launcher must have launched (its own launch counter) wherever ``FALLBACKS`` does not name the
kernel. ``host``: per op of ``scripts/host_parts.py``'s cases, us per call of the public call with
the C launcher off and on (caches rebuilt at each switch, interleaved rounds) and of the recipe's
launches alone through Triton's launcher, the C launcher, and the C launcher holding the GIL.

``replay``: the same cases without poisoning, the C replay (``_clauncher.c``'s Replay) against the
generated Python replay, bitwise (``replay`` below).

``PYTHONPATH=src python3 scripts/clauncher_check.py bitwise|replay|host|driver --out FILE.json``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
DEV = "cuda"
SYNC = None  # torch.cuda.synchronize unless --fake


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [out] if out is not None else []


def _reset(flag):
    from warpgauge.kernels import _launch, _replay

    _launch.C_LAUNCH = flag
    _launch.clear_launch_cache()
    _replay.clear()


def bitwise_cases(dev):
    import torch

    import warpgauge as wg

    g = torch.Generator().manual_seed(1)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16).to(dev)

    x, r, w = rand(32, 127), rand(32, 127), rand(127)
    xw = rand(7, 5003)  # a looped/split softmax row plan
    xs = rand(40, 300)[:, :257]  # strided rows
    a, b = rand(64, 64), rand(64, 64)
    a2, b2 = rand(61, 75), rand(75, 93)  # unaligned rows: the pointer kernel
    f1, f2 = rand(4097), rand(4097)
    int4 = {}
    for m, n, k in ((1, 256, 256), (1, 4096, 4096), (8, 4096, 4096), (64, 1024, 4096)):
        int4[m, n, k] = (rand(m, k), wg.quantize_int4(rand(n, k, scale=0.05)))

    def lin(key):
        return lambda: wg.int4_linear(*int4[key])

    # the host suite's shapes first (a run cut by its time limit keeps those), then other plans
    cases = [
        ("softmax 32x127", lambda: wg.softmax(x)),
        ("add_rms_norm 32x127", lambda: wg.add_rms_norm(x, r, w, 1e-6)),
        ("row_sum 32x127", lambda: wg.row_sum(x)),
        ("add 4097", lambda: wg.add(f1, f2)),
        ("gemm 64x64x64", lambda: wg.gemm(a, b)),
        ("int4_linear 1x256x256", lin((1, 256, 256))),
        ("int4_linear 1x4096x4096", lin((1, 4096, 4096))),
        ("softmax 7x5003", lambda: wg.softmax(xw)),
        ("softmax strided 40x257", lambda: wg.softmax(xs)),
        ("row_sum 7x5003 fp32", lambda: wg.row_sum(xw, torch.float32)),
        ("gemm 61x75x93", lambda: wg.gemm(a2, b2)),
        ("int4_linear 8x4096x4096", lin((8, 4096, 4096))),
        ("int4_linear 64x1024x4096", lin((64, 1024, 4096))),
    ]
    return cases


def _bitwise_same(calls_a, calls_b) -> bool:
    """Two lists of calls' outputs (each a list of tensors) equal byte for byte."""
    import torch

    return all(
        len(p) == len(q)
        and all(
            s.dtype == t.dtype
            and s.shape == t.shape
            and torch.equal(s.contiguous().view(torch.uint8), t.contiguous().view(torch.uint8))
            for s, t in zip(p, q)
        )
        for p, q in zip(calls_a, calls_b)
    )


def bitwise(out_path):
    import torch

    from warpgauge.kernels import _clauncher, _launch

    assert _launch.POISON, "run with WARPGAUGE_POISON_OUTPUTS=1 (outputs NaN-poisoned)"
    mod = _clauncher.module()
    print(f"C launcher: {mod} build_error={_clauncher.build_error()}", flush=True)
    res = {}
    for name, call in bitwise_cases(DEV):
        runs = {}
        try:
            for flag in (False, True):
                _reset(flag)
                n0 = mod.launches() if mod else 0
                outs = [[t.clone() for t in _flat(call())] for _ in range(4)]
                (SYNC or torch.cuda.synchronize)()
                runs[flag] = (outs, (mod.launches() if mod else 0) - n0)
        except Exception as e:  # noqa: BLE001 - a failing case is recorded, the others still run
            res[name] = {
                "bitwise_equal": False,
                "nan_in_c_outputs": -1,
                "c_launches": -1,
                "c_launches_with_flag_off": -1,
                "error": f"{type(e).__name__}: {e}",
            }
            print(f"{name:26s} ERROR {res[name]['error']}", flush=True)
            continue
        (tri, n_tri), (cl, n_c) = runs[False], runs[True]
        same = _bitwise_same(tri, cl)
        nans = sum(int(t.isnan().sum()) for o in cl for t in o if t.is_floating_point())
        res[name] = {"bitwise_equal": same, "nan_in_c_outputs": nans, "c_launches": n_c,
                     "c_launches_with_flag_off": n_tri}  # fmt: skip
        print(f"{name:26s} equal={same} nan={nans} c_launches={n_c} (off: {n_tri})", flush=True)
        _write_bitwise(out_path, res, {})  # after each case: a cut run keeps what it had
    try:
        errors = _error_checks(mod) if mod is not None and DEV == "cuda" else {}
    except Exception as e:  # noqa: BLE001 - recorded as a failed check, the JSON still written
        errors = {"setup": {"ok": False, "error": f"{type(e).__name__}: {e}"}}
    _reset(True)
    doc = _write_bitwise(out_path, res, errors, final=True)
    print("fallbacks:", json.dumps(doc["fallbacks"], indent=1), flush=True)
    print(f"bitwise ok={doc['ok']}", flush=True)
    return 0 if doc["ok"] else 1


def replay(out_path):
    """The C replay (``_clauncher.c``'s Replay) against the generated Python replay, outputs not
    poisoned (as a user runs): every bitwise case, six calls on the same inputs with
    ``_replay.C_REPLAY`` off, then on (recipes rebuilt at each switch); the outputs of each pair
    of calls must be bitwise identical, and the case's recipes must hold C replays wherever
    their launches all went through the C launcher (``_replay.C_REPLAY_FALLBACKS`` says why
    not)."""
    import torch

    from warpgauge.kernels import _launch, _replay

    _launch.POISON = False
    res = {}
    for name, call in bitwise_cases(DEV):
        runs = {}
        try:
            for flag in (False, True):
                _replay.C_REPLAY = flag
                _reset(True)
                n0 = _replay.STATS["replays"]
                outs = [[t.clone() for t in _flat(call())] for _ in range(6)]
                (SYNC or torch.cuda.synchronize)()
                kinds = sorted({type(r.fast).__name__ for per in _replay._RECIPES.values()
                                for r in per.values() if type(r) is _replay._Recipe})  # fmt: skip
                runs[flag] = (outs, _replay.STATS["replays"] - n0, kinds)
        except Exception as e:  # noqa: BLE001 - a failing case is recorded, the others still run
            res[name] = {"bitwise_equal": False, "error": f"{type(e).__name__}: {e}"}
            print(f"{name:26s} ERROR {res[name]['error']}", flush=True)
            continue
        (py, n_py, k_py), (c, n_c, k_c) = runs[False], runs[True]
        same = _bitwise_same(py, c)
        nans = sum(int(t.isnan().sum()) for o in c for t in o if t.is_floating_point())
        res[name] = {"bitwise_equal": same, "nan_in_outputs": nans, "replays_python": n_py,
                     "replays_c": n_c, "recipe_kinds_python": k_py, "recipe_kinds_c": k_c}  # fmt: skip
        print(f"{name:26s} equal={same} nan={nans} replays py={n_py} c={n_c} kinds={k_c}",
              flush=True)  # fmt: skip
        _write_replay(out_path, res)
    _replay.C_REPLAY = True
    doc = _write_replay(out_path, res, final=True)
    print("C replay fallbacks:", json.dumps(doc["fallbacks"], indent=1), flush=True)
    print(f"replay ok={doc['ok']}", flush=True)
    return 0 if doc["ok"] else 1


def _write_replay(path, res, final=False):
    from warpgauge.kernels import _replay

    ok = all(v["bitwise_equal"] and v["nan_in_outputs"] == 0 for v in res.values())
    # not vacuous: each case replayed (calls 3-6 at least) and took the C replay at least once
    ok = ok and all(v["replays_c"] >= 3 and "Replay" in v["recipe_kinds_c"] for v in res.values())
    doc = {"ok": ok and final, "complete": final, "cases": res,
           "fallbacks": dict(_replay.C_REPLAY_FALLBACKS)}  # fmt: skip
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1)
    return doc


def _write_bitwise(path, res, errors, final=False):
    from warpgauge.kernels import _clauncher

    ok = all(v["bitwise_equal"] and v["nan_in_c_outputs"] == 0 for v in res.values())
    ok = ok and all(v["c_launches_with_flag_off"] == 0 for v in res.values())
    # not vacuous: calls 2-4 of each case (cached launch, replays) went through the C launcher
    ok = ok and all(v["c_launches"] >= 3 for v in res.values())
    ok = ok and all(v.get("ok") for v in errors.values())
    import torch
    import triton

    doc = {"ok": ok and final, "complete": final, "triton": triton.__version__,
           "torch": torch.__version__, "cases": res, "errors": errors,
           "fallbacks": dict(_clauncher.FALLBACKS), "build_error": _clauncher.build_error()}  # fmt: skip
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1)
    return doc


def _error_checks(mod):
    """A driver error and a CPU tensor through a real kernel's spec: clear Python errors."""
    import torch

    from warpgauge.kernels import _clauncher, _launch

    _reset(True)
    import warpgauge as wg

    x = torch.randn(4, 64, device="cuda").to(torch.bfloat16)
    wg.softmax(x)  # an entry with a C spec
    wg.softmax(x)
    spec = next((e.head[0] for per in _launch._CACHE.values() for e in per.values()
                 if type(e.head[0]) is bytes), None)  # fmt: skip
    if spec is None:
        return {"spec": {"ok": False, "error": "no C entry"}}
    head = list(_clauncher._HEADER.unpack_from(spec))
    codes = spec[_clauncher._HEADER.size : _clauncher._HEADER.size + head[5]].decode()
    buf = torch.empty(1 << 20, device="cuda")
    args = [buf.data_ptr() if c == "p" else None if c == "c" else 1.0 if c in "fged" else 1
            for c in codes]  # fmt: skip
    stream = _launch._RUNTIME[1](_launch._RUNTIME[0]())
    out = {}
    head[2] = 1 << 30  # 1 GiB of shared memory: the driver refuses the launch
    big = _clauncher._HEADER.pack(*head) + spec[_clauncher._HEADER.size :]
    for name, call, exc in (
        ("driver error", lambda: mod.launch(1, 1, 1, stream, big, *args), RuntimeError),
        ("cpu tensor", lambda: mod.launch(0, 1, 1, stream, spec,
                                          *[torch.ones(4) if c == "p" else a
                                            for c, a in zip(codes, args)]), ValueError),
    ):  # fmt: skip
        try:
            call()
            out[name] = {"ok": False, "error": "no exception"}
        except Exception as e:  # noqa: BLE001 - recorded and checked below
            out[name] = {"ok": isinstance(e, exc) and "warpgauge C launcher" in str(e),
                         "error": f"{type(e).__name__}: {e}"}  # fmt: skip
        print(f"{name}: {out[name]}", flush=True)
    torch.cuda.synchronize()  # the context survives both
    return out


def _loop(fn, calls, sync):
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    sync()
    return (t1 - t0) / calls * 1e6


def _launch_variants(launcher, args, tensors):
    """The recipe's launches alone, by Triton's launcher / the C launcher / C holding the GIL."""
    from warpgauge.kernels import _clauncher, _launch, _replay

    recipe = next((r for r in _replay._RECIPES.get(launcher, {}).values()
                   if type(r) is _replay._Recipe), None)  # fmt: skip
    if recipe is None:
        return {}, None
    by_spec = {id(e.head[0]): e for per in _launch._CACHE.values() for e in per.values()}
    allocs = [torch_empty(shape, dtype, dev) for shape, dtype, dev in recipe.allocs]
    every = [t.data_ptr() for t in tensors] + [t.data_ptr() for t in allocs]
    stream = _launch._RUNTIME[1](_launch._RUNTIME[0]())
    tri, cl, held, any_c = [], [], [], False
    for fast, head, g0, g1, g2, template, slots, descs in recipe.launches:
        if descs:
            return {}, allocs
        a = list(template)
        for pos, src in slots:
            a[pos] = every[src]
        entry = by_spec.get(id(head[0]))
        if entry is None:
            return {}, allocs
        tfast, thead = _launch._c_launcher(entry.run, entry.function, entry.packed)
        tri.append((tfast, (g0, g1, g2, stream, *thead, *a)))
        cl.append((fast, (g0, g1, g2, stream, *head, *a)))
        spec = head[0]
        if type(spec) is bytes:  # the same spec with the GIL held through the launch
            h = list(_clauncher._HEADER.unpack_from(spec))
            h[4] &= ~_clauncher.FLAG_GIL  # WgSpec.flags
            spec = _clauncher._HEADER.pack(*h) + spec[_clauncher._HEADER.size :]
        held.append((fast, (g0, g1, g2, stream, spec, *head[1:], *a)))
        any_c = any_c or type(head[0]) is bytes

    def run(calls):
        def launch_all():
            for f, x in calls:
                f(*x)

        launch_all.calls = calls  # (fast, args) per launch, for ``driver``
        return launch_all

    out = {"launches, Triton": run(tri)}
    if any_c:
        out["launches, C"] = run(cl)
        out["launches, C, GIL held"] = run(held)
    return out, allocs


def torch_empty(shape, dtype, dev):
    import torch

    return torch.empty(shape, dtype=dtype, device=dev)


def host(out_path, calls, rounds, ops):
    import host_parts
    import torch

    import warpgauge as wg

    sync = SYNC or torch.cuda.synchronize
    every = {c[0]: c for c in host_parts.cases(DEV)}
    res = {}
    for op in ops or list(every):
        _, launcher, call_args, tensors, _, theirs = every[op]
        public = getattr(wg, op)
        got = {}
        if DEV == "cpu":
            theirs = lambda: None  # noqa: E731 - PyTorch's op is not comparable on the CPU
        gc.disable()
        try:
            for k in range(rounds):
                order = (False, True) if k % 2 == 0 else (True, False)
                for flag in order:
                    _reset(flag)
                    for _ in range(20):
                        public(*call_args)
                    name = f"public, C launcher {'on' if flag else 'off'}"
                    got.setdefault(name, []).append(_loop(lambda: public(*call_args), calls, sync))
                    if flag:  # the C recipe is live: time the launches alone, rotating
                        lv, keep = _launch_variants(launcher, call_args, tensors)
                        names = list(lv)
                        j = k % max(1, len(names))
                        for n in names[j:] + names[:j]:
                            for _ in range(20):
                                lv[n]()
                            got.setdefault(n, []).append(_loop(lv[n], calls, sync))
                        del keep
                got.setdefault("PyTorch", []).append(_loop(theirs, calls, sync))
        finally:
            gc.enable()
        res[op] = {n: {"median_us": statistics.median(s), "min_us": min(s), "n": len(s)}
                   for n, s in got.items()}  # fmt: skip
        print(f"{op:13s} " + "  ".join(f"{n}={v['median_us']:.2f}" for n, v in res[op].items()),
              flush=True)  # fmt: skip
        with open(out_path, "w") as fh:  # after each op: a cut run keeps what it measured
            json.dump({"calls": calls, "rounds": rounds, "torch": torch.__version__,
                       "ops": res}, fh, indent=1)  # fmt: skip
    return res


def driver(out_path, ops, n=200, rounds=5):
    """The driver's own cost: each recipe launch's cuLaunchKernel timed inside C
    (``time_launches``), ``n`` back-to-back after a sync (short of the launch queue's depth), and
    the same call from a Python loop (``launches, C``) for scale. us per launch."""
    import host_parts
    import torch

    import warpgauge as wg
    from warpgauge.kernels import _clauncher

    mod = _clauncher.module()
    every = {c[0]: c for c in host_parts.cases("cuda")}
    res = {}
    for op in ops or list(every):
        _, launcher, call_args, tensors, _, _ = every[op]
        _reset(True)
        public = getattr(wg, op)
        for _ in range(20):
            public(*call_args)
        lv, keep = _launch_variants(launcher, call_args, tensors)
        if "launches, C" not in lv:
            continue
        calls = lv["launches, C"].calls
        ns, py = [], []
        for _ in range(rounds):
            for _fast, a in calls:
                torch.cuda.synchronize()
                ns += mod.time_launches(n, *a)
            torch.cuda.synchronize()
            py.append(_loop(lv["launches, C"], n, torch.cuda.synchronize))
        del keep
        us = sorted(x / 1e3 for x in ns)
        res[op] = {"launches_per_call": len(calls), "driver_median_us": statistics.median(us),
                   "driver_min_us": us[0], "driver_p90_us": us[int(0.9 * len(us))],
                   "python_loop_median_us": statistics.median(py)}  # fmt: skip
        print(f"{op:13s} " + "  ".join(f"{k}={v:.2f}" for k, v in res[op].items()), flush=True)
        with open(out_path, "w") as fh:
            json.dump({"n": n, "rounds": rounds, "ops": res}, fh, indent=1)
    return res


def summary(bitwise_path, host_path):
    """The table printed last by the GPU script: bitwise results, then host us per call."""
    for path, show in ((bitwise_path, _show_bitwise), (host_path, _show_host)):
        try:
            with open(path) as fh:
                show(json.load(fh))
        except (OSError, ValueError) as e:
            print(f"{path}: not readable ({e})")
    return 0


def _show_bitwise(doc):
    print(f"bitwise ok={doc.get('ok')} complete={doc.get('complete')} triton={doc.get('triton')} "
          f"build_error={doc.get('build_error')}")  # fmt: skip
    for name, v in doc["cases"].items():
        print(f"  {name:26s} equal={v['bitwise_equal']!s:5s} nan={v['nan_in_c_outputs']:<4d} "
              f"C launches={v['c_launches']}")  # fmt: skip
    for k, v in doc.get("errors", {}).items():
        print(f"  error check {k}: ok={v['ok']}  {v['error'][:110]}")
    for k, why in doc.get("fallbacks", {}).items():
        print(f"  Triton's launcher: {k}: {why}")


def _show_host(doc):
    cols = ["public, C launcher off", "public, C launcher on", "launches, Triton", "launches, C",
            "launches, C, GIL held", "PyTorch"]  # fmt: skip
    short = ["pub off", "pub on", "L Triton", "L C", "L C GIL", "PyTorch"]
    print("host us/call (median)  " + "".join(f"{c:>10s}" for c in short))
    for op, v in doc["ops"].items():
        cells = "".join(f"{v[c]['median_us']:10.2f}" if c in v else f"{'-':>10s}" for c in cols)
        print(f"  {op:20s} {cells}")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("bitwise", "replay", "host", "driver", "summary"))
    ap.add_argument("--out", required=True, help="JSON to write (summary: bitwise.json,host.json)")
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--ops", default="")
    ap.add_argument("--fake", action="store_true", help="smoke test on the CPU (tests/fake_gpu)")
    a = ap.parse_args(argv)
    global DEV, SYNC
    if a.what == "summary":
        return summary(*a.out.split(","))
    if a.fake:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
        import fake_gpu

        fake_gpu.install()
        DEV, SYNC = "cpu", lambda: None
    if a.what == "bitwise":
        return bitwise(a.out)
    if a.what == "replay":
        return replay(a.out)
    ops = [o for o in a.ops.split(",") if o]
    if a.what == "driver":
        driver(a.out, ops)
        return 0
    host(a.out, a.calls, a.rounds, ops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
