"""add_rms_norm backward sweep (helper rmsbwd): the old rule against candidate row-group rules and
plans, over a broad grid of model hidden sizes and row counts, and the training step
(forward + backward through autograd, as ``--mode fwd_bwd`` times it) of warpgauge old / new
against torch eager autograd of ``x + r -> F.rms_norm``.

    PYTHONPATH=src python3 experiments/rmsbwd_sweep.py --out $OUT --budget 40

Every candidate's dx and dw are checked against the FP64 reference before timing (the
``warpgauge.reference`` tolerance table), and its dw against a second call bit for bit. Timing:
CUDA-graph replay (experiments/graph_timer.py) of back-to-back calls, in two lanes: ``rot``
cycles through input sets totalling more than 3x L2 (each call reads its inputs from DRAM, as
the harness's cold lane), ``warm`` repeats one set. Compilation happens first in parallel
worker processes (one per width: kernels are compiled per width), which fill Triton's disk cache.

``--tiny`` runs a few small shapes through the Triton interpreter on the CPU (set
TRITON_INTERPRET=1) with wall-clock timing: a smoke test of this script, not a measurement.
Writes ``sweep.jsonl`` (one record per measurement, flushed as it goes) and prints a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
import zlib

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from warpgauge.kernels import _replay  # noqa: E402
from warpgauge.kernels import rmsnorm_backward as bwd  # noqa: E402
from warpgauge.kernels.plans import RowPlan, body_block  # noqa: E402
from warpgauge.reference import compare  # noqa: E402

DT = torch.bfloat16
EPS = 1e-6
# The training suite's add_rms_norm shapes first (bench/operators/add_rms_norm.py), then a broad
# grid of hidden sizes (powers of two, model widths, an 11008-ish odd one) x row counts.
TRAINING = [(1024, 1024), (32, 127), (512, 4097), (16384, 4096), (8192, 5120), (4096, 8192),
            (2048, 14336), (4, 32769), (64, 131072)]  # fmt: skip
WIDTHS = [768, 1024, 2048, 2560, 3072, 4096, 5120, 7168, 8192, 11008, 16384]
ROWS = [1, 256, 2048, 8192, 32768]
MAX_NUMEL = 1 << 27
TARGET_S = 5e-4  # seconds per graph replay
PHASE1_MIN_ROWS = 512  # forced plans only where rows fill the GPU (--tiny: 8)
TINY = [(3, 64), (37, 300), (130, 64), (9, 1000), (8, 9000), (2, 20000)]


def grid(tiny: bool) -> list[tuple[int, int]]:
    if tiny:
        return TINY
    out = list(TRAINING)
    for n in WIDTHS:
        for r in ROWS:
            if r * n <= MAX_NUMEL and (r, n) not in out:
                out.append((r, n))
    return out


def candidates(rows: int, n: int, sm: int, phase: int):
    """(name, tune, plan). Phase 0: ``old`` (the rule before this branch), ``new`` (the module's
    TUNE with the rule's plan) and min_group_elems variants; phase 1: forced resident plans (rows
    per step, warps, groups per SM) where the rule is resident and there are >= 512 rows."""
    legacy = bwd.BwdTune(legacy=True)
    new = bwd.TUNE
    base = RowPlan.for_shape(rows, n, sm, "rms_bwd")
    if phase == 0:
        out = [("old", legacy, None), ("new", new, None)]
        if base.kind == "resident" and rows >= 8:
            for e in (4096, 16384, 65536):
                out.append((f"e{e}", bwd.BwdTune(min_group_elems=e), None))
        return out
    out = []
    if base.kind != "resident" or rows < PHASE1_MIN_ROWS:
        return out
    body = body_block(n)
    w0 = base.num_warps
    for k in (1, 2, 4, 8):
        if k != base.programs_per_sm:
            p = RowPlan("resident", body, w0, programs_per_sm=k, prefetch=base.prefetch)
            out.append((f"k{k}", new, p))
    # Several rows per step: a [r, body] tile (warps for the tile), prefetched up to 4096
    # elements, single-buffered up to 8192: more loads in flight per program with fewer groups.
    for r in (2, 4, 8):
        for pf in (True, False):
            if r * body <= (4096 if pf else 8192):
                w = min(16, max(w0, r * body // 512))
                for k in (1, 2):
                    p = RowPlan("resident", body, w, rows=r, programs_per_sm=k, prefetch=pf)
                    out.append((f"r{r}{'p' if pf else 'n'}w{w}k{k}", new, p))
    if not base.prefetch:
        for k in (1, 2):
            p = RowPlan("resident", body, w0, programs_per_sm=k, prefetch=False)
            out.append((f"dh-k{k}", dataclasses.replace(new, early_dh=True), p))
    for w in (w0 // 2, w0 * 2):
        if 1 <= w <= 32 and 1 <= body // (32 * w) <= 32:
            for k in (1, 2):
                p = RowPlan("resident", body, w, programs_per_sm=k, prefetch=base.prefetch)
                out.append((f"w{w}k{k}", new, p))
    return out


def rand(shape, g, dev, dtype=DT):
    return torch.randn(*shape, generator=g, device=dev, dtype=torch.float32).to(dtype)


def make_sets(rows, n, dev, count, seed):
    g = torch.Generator(device=dev).manual_seed(seed)
    return [tuple(rand((rows, n), g, dev) for _ in range(3)) for _ in range(count)]  # h, dy, dh


def ref_grads(h, dy, dh, w):
    h64 = h.double().requires_grad_()
    w64 = w.double().requires_grad_()
    y = h64 * torch.rsqrt(h64.square().mean(-1, keepdim=True) + EPS) * w64
    y.backward(dy.double())
    return (h64.grad + dh.double()).to(DT), w64.grad.to(DT)


def time_fn(fns, tiny: bool, target_s: float):
    """Per-call seconds (median, min, calls per graph) of cycling through ``fns``."""
    it = [0]

    def call():
        f = fns[it[0] % len(fns)]
        it[0] += 1
        return f()

    if tiny:
        call()
        t = time.perf_counter()
        for _ in range(len(fns)):
            call()
        dt = (time.perf_counter() - t) / len(fns)
        return dt, dt, len(fns)
    from graph_timer import bench_graph

    # Calls per graph from device time (a 4-call graph), not from the host-bound eager estimate:
    # a replay of about target_s, and every rotated input set at least once where that fits.
    d = bench_graph(call, replays=1, calls=4)[0]
    n = int(min(max(target_s / max(d, 1e-7), 4, min(len(fns), 200)), 200))
    return bench_graph(call, replays=3, calls=n)


COLD1_MAX_BYTES = 64 << 20  # the single-call cold lane only where launches matter
_FLUSH: list = []


def cold1(fn, l2: int, reps: int = 12) -> float:
    """The harness's cold lane: median us of one call per graph replay, L2 flushed (a write of
    4x L2) before each replay, outside the timed interval."""
    if not _FLUSH:
        _FLUSH.append(torch.empty(4 * l2, dtype=torch.uint8, device="cuda"))
    buf = _FLUSH[0]
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g.replay()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    ts = []
    for _ in range(reps):
        buf.zero_()
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def with_tune(tune, fn):
    def run():
        old = bwd.TUNE
        bwd.TUNE = tune
        try:
            return fn()
        finally:
            bwd.TUNE = old

    return run


def compile_key(rows, n, sm, tune, plan) -> int:
    """Candidates that compile the same kernels share a key (the resolved plan, the tune's
    constexpr-relevant fields): one warm-up worker compiles each key."""
    p = plan or RowPlan.for_shape(rows, n, sm, "rms_bwd")
    pad = p.split_pad(n) if p.kind == "split" else 0  # programs_per_sm compiles nothing
    return zlib.crc32(repr((n, p.kind, p.block, p.rows, p.num_warps, p.prefetch, pad,
                            tune.early_dh)).encode())  # fmt: skip


def warm_up(shapes, part, nparts, dev, sm, l2, tiny, deadline):
    """Compile worker: the unique compile keys, in grid order, dealt round-robin to the parts;
    this part runs one candidate (or training step) of each of its keys once."""
    order: dict = {}  # key -> (rows, n, candidate name or None for the step)
    for rows, n in shapes:
        for name, tune, plan in candidates(rows, n, sm, 0) + candidates(rows, n, sm, 1):
            order.setdefault(compile_key(rows, n, sm, tune, plan), (rows, n, name))
        if (rows, n) in STEP_SHAPES:
            order.setdefault(("step", n), (rows, n, None))
    mine: dict = {}
    for i, (rows, n, name) in enumerate(order.values()):
        if i % nparts == part:
            mine.setdefault((rows, n), []).append(name)
    for (rows, n), names in mine.items():
        if time.time() > deadline:
            return
        if any(names_ is not None for names_ in names):
            bwd_case(rows, n, dev, sm, l2, tiny, lambda r: None, deadline, True,
                     only=[x for x in names if x is not None])  # fmt: skip
        if None in names:
            step_case(rows, n, dev, l2, tiny, lambda r: None, deadline, True)
        if dev == "cuda":
            torch.cuda.empty_cache()


def bwd_case(rows, n, dev, sm, l2, tiny, emit, deadline, warm_only=False, phase=0, only=()):
    set_bytes = rows * n * 2 * 4
    if not warm_only and not candidates(rows, n, sm, phase):
        return True
    n_sets = 1 if tiny else int(min(48, max(1, math.ceil(3 * l2 / set_bytes))))
    sets = make_sets(rows, n, dev, 1 if warm_only else n_sets, seed=rows * 31 + n)
    g = torch.Generator(device=dev).manual_seed(n)
    w = rand((n,), g, dev)
    h, dy, dh = sets[0]
    dx_ref, dw_ref = (None, None) if warm_only else ref_grads(h, dy, dh, w)
    cands = candidates(rows, n, sm, 0) + candidates(rows, n, sm, 1) if warm_only else []
    cands = [c for c in cands if c[0] in only]
    for name, tune, plan in cands or candidates(rows, n, sm, phase):
        if time.time() > deadline:
            return False
        rec = {"kind": "bwd", "rows": rows, "width": n, "cand": name, "plan": repr(plan)}
        try:

            def one(s, tune=tune, plan=plan):
                return with_tune(tune, lambda: bwd.add_rms_norm_backward(
                    s[1], s[2], s[0], w, EPS, plan=plan))()  # fmt: skip

            dx, dw = one(sets[0])
            if warm_only:
                continue
            cx, cw = compare(dx, dx_ref), compare(dw, dw_ref)
            rec["gate_dx"], rec["gate_dw"] = cx.worst_ratio, cw.worst_ratio
            rec["det"] = bool(torch.equal(one(sets[0])[1], dw))
            rec["kernels"] = with_tune(
                tune, lambda p=plan: bwd.backward_kernels(rows, n, h.device, p)
            )()
            if not (cx.ok and cw.ok and rec["det"]):
                rec["error"] = f"gate dx {cx} dw {cw} det {rec['det']}"
            else:
                fns = [lambda s=s, f=one: f(s) for s in sets]
                rec["rot_us"] = time_fn(fns, tiny, TARGET_S)[0] * 1e6
                rec["warm_us"] = (
                    time_fn(fns[:1], tiny, TARGET_S)[0] * 1e6 if len(fns) > 1 else rec["rot_us"]
                )
                rec["tbps_rot"] = set_bytes / (rec["rot_us"] * 1e-6) / 1e12
                if not tiny and set_bytes <= COLD1_MAX_BYTES:
                    rec["cold1_us"] = cold1(fns[0], l2)
        except Exception as e:  # a sweep records a candidate's failure and goes on
            rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        emit(rec)
    return True


def step_case(rows, n, dev, l2, tiny, emit, deadline, warm_only=False):
    """The training step: warpgauge (old / new backward rule) and torch eager autograd."""
    import warpgauge as wg

    set_bytes = rows * n * 2 * 7  # x, r, gy, gh read; y, h written; dx written (requested)
    n_sets = 1 if tiny else int(min(32, max(1, math.ceil(3 * l2 / set_bytes))))
    g = torch.Generator(device=dev).manual_seed(rows + 7 * n)
    w = rand((n,), g, dev).requires_grad_()
    sets = []
    for _ in range(1 if warm_only else n_sets):
        x, r = (rand((rows, n), g, dev).requires_grad_() for _ in range(2))
        sets.append((x, r, rand((rows, n), g, dev), rand((rows, n), g, dev)))

    def wg_step(s):
        y, h = wg.add_rms_norm(s[0], s[1], w, EPS)
        return torch.autograd.grad((y, h), (s[0], s[1], w), (s[2], s[3]))

    def torch_step(s):
        h = s[0] + s[1]
        y = F.rms_norm(h, (n,), w, EPS)
        return torch.autograd.grad((y, h), (s[0], s[1], w), (s[2], s[3]))

    x, r, gy, gh = sets[0]
    if not warm_only:
        hq = (x.detach().float() + r.detach().float()).to(DT)
        if tiny:  # the interpreter truncates FP32 -> BF16 (h may be an ulp off): warpgauge's h
            hq = wg.add_rms_norm(x.detach(), r.detach(), w.detach(), EPS)[1]
        dx_ref, dw_ref = ref_grads(hq, gy, gh, w.detach())
    provs = [("torch", None, torch_step), ("wg-old", bwd.BwdTune(legacy=True), wg_step),
             ("wg-new", bwd.TUNE, wg_step)]  # fmt: skip
    for name, tune, step in provs:
        if time.time() > deadline:
            return False
        rec = {"kind": "step", "rows": rows, "width": n, "cand": name}
        _replay.clear()  # eager calls replay recorded launches: a recording made under another
        try:  # provider's TUNE must not serve this one
            f = step if tune is None else (lambda s, st=step, t=tune: with_tune(t, lambda: st(s))())
            gx, gr, gw = f(sets[0])
            if warm_only:
                continue
            c = [compare(gx, dx_ref), compare(gr, dx_ref), compare(gw, dw_ref)]
            rec["gate"] = max(cc.worst_ratio for cc in c)
            if not all(cc.ok for cc in c) and name != "torch":
                rec["error"] = "gate " + " / ".join(str(cc) for cc in c)
            else:
                rec["gate_ok"] = all(cc.ok for cc in c)
                fns = [lambda s=s, f=f: f(s) for s in sets]
                rec["rot_us"] = time_fn(fns, tiny, TARGET_S)[0] * 1e6
                rec["warm_us"] = (
                    time_fn(fns[:1], tiny, TARGET_S)[0] * 1e6 if len(fns) > 1 else rec["rot_us"]
                )
                if not tiny and set_bytes <= COLD1_MAX_BYTES:
                    rec["cold1_us"] = cold1(fns[0], l2)
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        emit(rec)
    return True


STEP_SHAPES = TRAINING + [(4096, 4096), (1024, 4096), (4096, 2048), (128, 4096), (1, 4096),
                          (4096, 11008), (1024, 16384), (8192, 2560)]  # fmt: skip


def _f(v, w=8):
    return f"{v:{w}.2f}" if v else f"{'-':>{w}}"


def summarize(recs: list[dict]) -> None:
    by: dict = {}
    for r in recs:
        by.setdefault((r["kind"], r["rows"], r["width"]), {})[r["cand"]] = r
    print("\nbackward only (us): rotated lane old / new / best candidate; cold1 old / new / best")
    print(f"{'shape':>14} {'old':>8} {'new':>8} {'old/new':>7} {'best':>12} {'us':>8} {'k':>2} "
          f"| {'c1 old':>8} {'c1 new':>8} {'c1 best':>12} {'us':>8}")  # fmt: skip
    for (kind, rows, n), c in by.items():
        if kind != "bwd":
            continue
        ok = {k: v for k, v in c.items() if "rot_us" in v}
        if not ok:
            print(f"{rows:>7}x{n:<6} all failed: {next(iter(c.values())).get('error', '')[:80]}")
            continue
        best = min(ok, key=lambda k: ok[k]["rot_us"])
        o, nw = ok.get("old", {}).get("rot_us"), ok.get("new", {}).get("rot_us")
        ratio = f"{o / nw:7.2f}" if o and nw else f"{'-':>7}"
        c1 = {k: v["cold1_us"] for k, v in ok.items() if "cold1_us" in v}
        b1 = min(c1, key=c1.get) if c1 else "-"
        print(f"{rows:>7}x{n:<6} {_f(o)} {_f(nw)} {ratio} {best:>12} {_f(ok[best]['rot_us'])} "
              f"{ok.get('new', {}).get('kernels', 0):>2} | {_f(c1.get('old'))} {_f(c1.get('new'))} "
              f"{b1:>12} {_f(c1.get(b1))}")  # fmt: skip
    print(
        "\ntraining step (fwd+bwd, us): rotated lane torch / wg-old / wg-new (torch/new) | "
        "warm torch / new | cold1 torch / old / new (torch/new)"
    )
    for (kind, rows, n), c in by.items():
        if kind != "step":
            continue

        def g(name, key, c=c):
            return c.get(name, {}).get(key)

        t, o, nw = g("torch", "rot_us"), g("wg-old", "rot_us"), g("wg-new", "rot_us")
        t1, o1, n1 = g("torch", "cold1_us"), g("wg-old", "cold1_us"), g("wg-new", "cold1_us")
        r = f"{t / nw:5.2f}" if t and nw else "  -  "
        r1 = f"{t1 / n1:5.2f}" if t1 and n1 else "  -  "
        print(f"{rows:>7}x{n:<6} {_f(t)} {_f(o)} {_f(nw)} x{r} | {_f(g('torch', 'warm_us'))} "
              f"{_f(g('wg-new', 'warm_us'))} | {_f(t1)} {_f(o1)} {_f(n1)} x{r1}")  # fmt: skip


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/rmsbwd_out"))
    ap.add_argument("--budget", type=float, default=40.0, help="seconds for the whole script")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--part", type=int, default=-1)
    ap.add_argument("--nparts", type=int, default=12)
    ap.add_argument("--warm-timeout", type=float, default=20.0)
    args = ap.parse_args()
    global PHASE1_MIN_ROWS
    if args.tiny:
        PHASE1_MIN_ROWS = 8
    t0 = time.time()
    deadline = t0 + args.budget
    dev = "cpu" if args.tiny else "cuda"
    from warpgauge._device import device_info

    sm = device_info(torch.device(dev, 0) if dev == "cuda" else torch.device("cpu")).sm_count
    l2 = device_info(torch.device(dev)).l2_bytes if dev == "cuda" else 4 << 20
    shapes = grid(args.tiny)
    if args.part >= 0:  # warm-up worker: compile this part's kernels only
        warm_up(shapes, args.part, args.nparts, dev, sm, l2, args.tiny, deadline)
        return
    os.makedirs(args.out, exist_ok=True)
    print(f"{len(shapes)} shapes, SMs {sm}, L2 {l2 >> 20} MiB, torch {torch.__version__}",
          flush=True)  # fmt: skip
    procs = []
    if not args.tiny and args.nparts > 0:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        procs = [subprocess.Popen([sys.executable, __file__, "--part", str(i), "--nparts",
                                   str(args.nparts), "--budget", str(args.warm_timeout)], env=env)
                 for i in range(args.nparts)]  # fmt: skip
        for p in procs:
            try:
                p.wait(timeout=max(1.0, args.warm_timeout + 2 - (time.time() - t0)))
            except subprocess.TimeoutExpired:
                p.kill()
        print(f"warm-up compile: {time.time() - t0:.1f} s", flush=True)
    recs: list[dict] = []
    path = os.path.join(args.out, "sweep.jsonl")
    with open(path, "w") as fh:

        def emit(r):
            recs.append(r)
            fh.write(json.dumps(r) + "\n")
            fh.flush()
            if "error" in r:
                print("ERROR", r["kind"], r["rows"], r["width"], r["cand"], r["error"][:200])

        # Interleave: the training shapes' steps first, then backward candidates over the grid.
        order = [("step", s) for s in STEP_SHAPES[:9]] + [("bwd", s) for s in shapes]
        order += [("bwd1", s) for s in shapes] + [("step", s) for s in STEP_SHAPES[9:]]
        if args.tiny:
            order = [("bwd", s) for s in shapes] + [("bwd1", s) for s in shapes]
            order += [("step", s) for s in shapes[:2]]
        for kind, (rows, n) in order:
            if kind.startswith("bwd"):
                alive = bwd_case(
                    rows, n, dev, sm, l2, args.tiny, emit, deadline, phase=int(kind == "bwd1")
                )
            else:
                alive = step_case(rows, n, dev, l2, args.tiny, emit, deadline)
            if dev == "cuda":
                torch.cuda.empty_cache()
            if not alive:
                print(f"budget reached at {kind} {rows}x{n}", flush=True)
                break
    print(f"done in {time.time() - t0:.1f} s, {len(recs)} records -> {path}", flush=True)
    summarize(recs)


if __name__ == "__main__":
    main()
