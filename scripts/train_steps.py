"""Training-step timing: one forward and one backward through autograd, replayed as a CUDA graph
(CUDA GPU required).

For softmax, residual RMSNorm and GEMM at the suite shapes, each provider's step
``outs = f(*inputs); torch.autograd.grad(outs, inputs, grad_outputs)`` is warmed up (compiles,
autotunes), checked against FP64 gradients, captured in a ``torch.cuda.CUDAGraph`` (several steps
per graph for short steps) and replayed; one sample is one replay between two CUDA events,
divided by the steps in it. Providers are sampled in every round in rotating order; the tables
give the median (p10-p90) over rounds in microseconds per step, warm L2 (inputs stay resident
between replays). A second, smaller lane times the same step eagerly with events around each
step (host and device together: what an eager training loop pays per step).

Providers: PyTorch eager (``torch.softmax``; the RMSNorm composition with the contract's FP32
casts; ``torch.mm``/cuBLAS), ``x + r`` then ``F.rms_norm``, ``torch.compile`` of the PyTorch
function (static shapes; AOTAutograd compiles the backward), and warpgauge. GEMM steps report
TFLOP/s counting the three products (6 * M * N * K).

Usage: PYTHONPATH=src python3 scripts/train_steps.py --out results/train_steps
       [--ops softmax,rmsnorm,gemm] [--rounds 30] [--no-compile] [--dtype bfloat16]
Writes train_steps.json and train_steps.md. About 2 minutes on the H200, most of it torch.compile
(17 graphs) and GEMM autotuning; progress is printed per case.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

DEV = "cuda"  # --smoke-cpu: "cpu" under the Triton interpreter, eager timing, to check the logic

ROW_SHAPES = [(32, 127), (1024, 1024), (512, 4097), (4, 32769), (64, 131072), (16384, 4096)]
GEMM_SHAPES = [
    (127, 255, 65),
    (512, 512, 512),
    (1024, 1024, 1024),
    (4096, 4096, 4096),
    (16384, 1024, 1024),
]
SMOKE_ROWS = [(5, 127), (3, 8193)]
SMOKE_GEMM = [(37, 40, 33)]
EPS = 1e-6


def require_cuda(script: str) -> None:
    if not torch.cuda.is_available():
        sys.exit(
            f"{script}: no CUDA device is available. Training steps are timed by CUDA-graph "
            "replay on a CUDA GPU (the H200)."
        )


# ----------------------------------------------------------------------------------- providers


def rms_composition(x, r, w, eps=EPS):
    h = (x.float() + r.float()).to(x.dtype)
    hf = h.float()
    y = hf * torch.rsqrt(hf.square().mean(-1, keepdim=True) + eps) * w.float()
    return y.to(x.dtype), h


def add_then_rms_norm(x, r, w, eps=EPS):
    h = x + r
    return F.rms_norm(h, (h.shape[-1],), w, eps), h


def torch_softmax(x):
    return torch.softmax(x, -1)


def torch_mm(a, b):
    return torch.mm(a, b)


def providers(op: str, use_compile: bool) -> dict:
    import warpgauge as wg

    def compiled(fn):
        return torch.compile(fn, fullgraph=True, dynamic=False)

    if op == "softmax":
        p = {"PyTorch": torch_softmax}
        if use_compile:
            p["torch.compile"] = compiled(torch_softmax)
        p["warpgauge"] = wg.softmax
    elif op == "rmsnorm":
        p = {"PyTorch": rms_composition, "F.rms_norm": add_then_rms_norm}
        if use_compile:
            p["torch.compile"] = compiled(rms_composition)
        p["warpgauge"] = wg.add_rms_norm
    else:
        p = {"PyTorch": torch_mm}
        if use_compile:
            p["torch.compile"] = compiled(torch_mm)
        p["warpgauge"] = wg.gemm
    return p


def make_inputs(op: str, shape, dtype):
    g = torch.Generator(device=DEV).manual_seed(0)

    def rnd(*s, scale=1.0):
        return (torch.randn(s, generator=g, device=DEV) * scale).to(dtype)

    if op == "softmax":
        rows, n = shape
        return [rnd(rows, n).requires_grad_()], [rnd(rows, n)]
    if op == "rmsnorm":
        rows, n = shape
        x, r = rnd(rows, n).requires_grad_(), rnd(rows, n).requires_grad_()
        w = (1.0 + rnd(n, scale=0.1)).requires_grad_()
        return [x, r, w], [rnd(rows, n), rnd(rows, n)]  # gradients of y and of h
    M, N, K = shape
    a = rnd(M, K, scale=1.0).requires_grad_()
    b = rnd(K, N, scale=1.0 / math.sqrt(K)).requires_grad_()
    return [a, b], [rnd(M, N)]


def make_step(fn, inputs, grad_outputs):
    def step():
        outs = fn(*inputs)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        return torch.autograd.grad(outs, inputs, grad_outputs)

    return step


# ---------------------------------------------------------------------------------------- gate


def fp64_grads(op: str, inputs, grad_outputs):
    if op == "softmax":
        (x,), (dy,) = inputs, grad_outputs
        x64 = x.detach().double().requires_grad_()
        torch.softmax(x64, -1).backward(dy.double())
        return [x64.grad]
    if op == "rmsnorm":
        x, r, w = inputs
        dy, dh = grad_outputs
        # the contract's rounded h, straight-through to x and r
        h64 = (x.detach().float() + r.detach().float()).to(x.dtype).double().requires_grad_()
        w64 = w.detach().double().requires_grad_()
        y64 = h64 * torch.rsqrt(h64.square().mean(-1, keepdim=True) + EPS) * w64
        torch.autograd.backward((y64, h64), (dy.double(), dh.double()))
        return [h64.grad, h64.grad, w64.grad]
    a, b = (t.detach().double() for t in inputs)
    dc = grad_outputs[0].double()
    return [dc @ b.T, a.T @ dc]


def gate(step, refs) -> dict:
    from warpgauge.reference import compare

    grads = step()
    checks = [compare(g, ref.to(g.dtype), g.dtype) for g, ref in zip(grads, refs)]
    worst = max((c.worst_ratio for c in checks), default=0.0)
    err = max(c.max_abs_err for c in checks)
    return {  # JSON has no NaN/inf: non-finite values are recorded as null (and fail)
        "ok": all(c.ok for c in checks),
        "worst_ratio": worst if math.isfinite(worst) else None,
        "max_abs_err": err if math.isfinite(err) else None,
    }


# -------------------------------------------------------------------------------------- timing


def warm_clocks(ms: float = 200.0) -> None:
    """An idle GPU lowers its clocks: run matmuls for ~ms before a case is sampled."""
    if DEV != "cuda":
        return
    a = torch.randn(4096, 4096, device=DEV, dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


class GraphStep:
    """A step captured ``reps`` times in one CUDA graph; ``sample()`` returns us per step."""

    def __init__(self, step, target_us: float = 500.0, max_reps: int = 100):
        self.step = step
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):  # compiles, autotunes and allocator warm-up before capture
                step()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        self.reps = 1
        self.graph = self._capture(1)
        one = sorted(self._replay_us() for _ in range(5))[2]
        reps = max(1, min(max_reps, math.ceil(target_us / max(one, 1e-3))))
        if reps > 1:
            self.graph.reset()
            self.reps = reps
            self.graph = self._capture(reps)

    def _capture(self, reps):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                self.step()
        torch.cuda.synchronize()
        return g

    def _replay_us(self) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / self.reps

    def sample(self) -> float:
        return self._replay_us()

    def release(self):
        self.graph.reset()
        self.graph = None


class EagerStep:
    """Host + device per step: events around ``reps`` back-to-back eager steps."""

    def __init__(self, step, reps: int = 10):
        self.step, self.reps = step, reps
        for _ in range(3):
            step()

    def sample(self) -> float:
        if DEV != "cuda":
            t0 = time.perf_counter()
            for _ in range(self.reps):
                self.step()
            return (time.perf_counter() - t0) * 1e6 / self.reps
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(self.reps):
            self.step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / self.reps

    def release(self):
        pass


def sample_interleaved(timers: dict, rounds: int) -> dict:
    from warpgauge.bench.stats import summarize

    names = list(timers)
    samples = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for n in names[k:] + names[:k]:
            samples[n].append(timers[n].sample())
    return {n: summarize(v) for n, v in samples.items()}


# ---------------------------------------------------------------------------------------- cases


def run_case(op, shape, dtype, use_compile, rounds, eager_rounds) -> dict:
    label = "x".join(map(str, shape))
    t0 = time.time()
    inputs, grad_outputs = make_inputs(op, shape, dtype)
    refs = fp64_grads(op, inputs, grad_outputs)
    provs = providers(op, use_compile)
    steps = {n: make_step(fn, inputs, grad_outputs) for n, fn in provs.items()}
    gates = {}
    for n, step in steps.items():
        step()  # compile / autotune outside the gate's timing-free check
        gates[n] = gate(step, refs)
    del refs
    result = {"op": op, "shape": label, "dtype": str(dtype)[6:], "gate": gates}
    warm_clocks()
    if DEV == "cuda":
        graphs = {n: GraphStep(s) for n, s in steps.items()}
        result["graph_reps"] = {n: g.reps for n, g in graphs.items()}
        result["graph_us"] = sample_interleaved(graphs, rounds)
        for g in graphs.values():
            g.release()
        del graphs
    eager = {n: EagerStep(s) for n, s in steps.items()}
    result["eager_event_us"] = sample_interleaved(eager, eager_rounds)
    if op == "gemm":
        M, N, K = shape
        result["flops_per_step"] = 6 * M * N * K
    result["seconds"] = time.time() - t0
    if DEV == "cuda":
        torch.cuda.empty_cache()
    lane = result.get("graph_us") or result["eager_event_us"]
    summary = "  ".join(f"{n} {s['median_us']:.2f}" for n, s in lane.items())
    bad = [n for n, g in gates.items() if not g["ok"]]
    print(
        f"  {op:8s} {label:18s} {summary}  ({result['seconds']:.1f} s)"
        + (f"  GATE FAILED: {bad}" if bad else ""),
        flush=True,
    )
    return result


# ------------------------------------------------------------------------------------ outputs


def markdown(record: dict) -> str:
    p = record["provenance"]
    gpu = (p.get("gpu") or {}).get("name")
    pk = p.get("packages", {})
    cfg = record["config"]
    lane = "graph_us" if not cfg["smoke_cpu"] else "eager_event_us"
    lines = [
        "# Training steps: forward + backward through autograd",
        "",
        f"GPU: {gpu}; torch {pk.get('torch')}, triton {pk.get('triton')}; commit "
        f"{p.get('git_commit')}{' (dirty)' if p.get('git_dirty') else ''}; {cfg['dtype']}. "
        f"CUDA-graph replay, warm L2; us per step, median (p10-p90) of {cfg['rounds']} "
        "interleaved rounds. Speedup = PyTorch eager / warpgauge.",
        "",
    ]

    def cell(s):
        return "-" if s is None else f"{s['median_us']:.3f} ({s['p10_us']:.3f}-{s['p90_us']:.3f})"

    def gated(case, name):
        g = case["gate"].get(name)
        return "" if g is None or g["ok"] else " **gate failed**"

    for op, title in (("softmax", "Softmax"), ("rmsnorm", "Residual RMSNorm")):
        cases = [c for c in record["cases"] if c["op"] == op]
        if not cases:
            continue
        names = list(cases[0][lane])
        lines += [f"## {title}", "", "| shape | " + " | ".join(names) + " | speedup | vs compile |"]
        lines.append("|---" * (len(names) + 3) + "|")
        for c in cases:
            t = c[lane]
            sp = t["PyTorch"]["median_us"] / t["warpgauge"]["median_us"]
            vc = (
                f"{t['torch.compile']['median_us'] / t['warpgauge']['median_us']:.2f}x"
                if "torch.compile" in t
                else "-"
            )
            cells = " | ".join(cell(t[n]) + gated(c, n) for n in names)
            lines.append(f"| {c['shape']} | {cells} | {sp:.2f}x | {vc} |")
        lines.append("")
    cases = [c for c in record["cases"] if c["op"] == "gemm"]
    if cases:
        names = list(cases[0][lane])
        lines += [
            "## GEMM (M x N x K; TFLOP/s counts 6*M*N*K per step)",
            "",
            "| M x N x K | " + " | ".join(names) + " | speedup | TFLOP/s warpgauge vs PyTorch |",
        ]
        lines.append("|---" * (len(names) + 3) + "|")
        for c in cases:
            t = c[lane]
            sp = t["PyTorch"]["median_us"] / t["warpgauge"]["median_us"]
            tf = [c["flops_per_step"] / t[n]["median_us"] / 1e6 for n in ("warpgauge", "PyTorch")]
            cells = " | ".join(cell(t[n]) + gated(c, n) for n in names)
            lines.append(f"| {c['shape']} | {cells} | {sp:.2f}x | {tf[0]:.1f} vs {tf[1]:.1f} |")
        lines.append("")
    lines += [
        "## Eager steps, events around each step (host + device)",
        "",
        "| op | shape | " + " | ".join(["PyTorch", "warpgauge"]) + " |",
        "|---|---|---|---|",
    ]
    for c in record["cases"]:
        t = c["eager_event_us"]
        lines.append(
            f"| {c['op']} | {c['shape']} | {cell(t['PyTorch'])} | {cell(t['warpgauge'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    global DEV
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for train_steps.{json,md}")
    ap.add_argument("--ops", default="softmax,rmsnorm,gemm")
    ap.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    ap.add_argument("--rounds", type=int, default=30, help="graph-replay samples per provider")
    ap.add_argument("--eager-rounds", type=int, default=10, help="eager-lane samples")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile provider")
    ap.add_argument("--smoke-cpu", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    for o in ops:
        if o not in ("softmax", "rmsnorm", "gemm"):
            sys.exit(f"--ops takes softmax, rmsnorm and gemm; got {o!r}")
    if args.smoke_cpu:
        if os.environ.get("TRITON_INTERPRET") != "1":
            sys.exit("--smoke-cpu needs TRITON_INTERPRET=1 set before the script starts")
        DEV = "cpu"
        args.no_compile = True
        args.rounds, args.eager_rounds = 2, 2
        row_shapes, gemm_shapes = SMOKE_ROWS, SMOKE_GEMM
    else:
        require_cuda("train_steps.py")
        row_shapes, gemm_shapes = ROW_SHAPES, GEMM_SHAPES
    from warpgauge.artifacts import atomic_write_bytes, atomic_write_json, utc_now
    from warpgauge.environment import provenance

    dtype = getattr(torch, args.dtype)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    torch._dynamo.config.automatic_dynamic_shapes = False  # one specialized graph per shape
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    cases = []
    n_cases = sum(len(gemm_shapes if o == "gemm" else row_shapes) for o in ops)
    print(
        f"{n_cases} cases, {args.dtype}, compile {'off' if args.no_compile else 'on'}", flush=True
    )
    for op in ops:
        for shape in gemm_shapes if op == "gemm" else row_shapes:
            cases.append(
                run_case(op, shape, dtype, not args.no_compile, args.rounds, args.eager_rounds)
            )
    record = {
        "what": "scripts/train_steps.py: forward + backward step timing",
        "created_at": utc_now(),
        "provenance": provenance(),
        "config": {
            "dtype": args.dtype,
            "rounds": args.rounds,
            "eager_rounds": args.eager_rounds,
            "compile": not args.no_compile,
            "smoke_cpu": args.smoke_cpu,
            "method": "step = f(*inputs) + torch.autograd.grad(outs, inputs, grad_outputs); "
            "graph lane: reps steps captured in one torch.cuda.CUDAGraph after 3 warm-up steps "
            "on a side stream, one replay per sample between CUDA events, us = elapsed / reps; "
            "providers interleaved in rotating order; ~200 ms matmul clock warm-up per case. "
            "Eager lane: CUDA events around 10 back-to-back eager steps.",
        },
        "cases": cases,
        "seconds": time.time() - t0,
    }
    atomic_write_json(out / "train_steps.json", record)
    md = markdown(record)
    atomic_write_bytes(out / "train_steps.md", md.encode())
    print()
    print(md)
    print(f"wrote {out / 'train_steps.json'} and train_steps.md in {record['seconds']:.0f} s")
    failed = [(c["op"], c["shape"], n) for c in cases for n, g in c["gate"].items() if not g["ok"]]
    if any(n == "warpgauge" for *_, n in failed):
        print(f"FAIL: warpgauge gradients out of tolerance: {failed}", file=sys.stderr)
        return 1
    if failed:
        print(
            f"note: baseline gradients out of tolerance (timed anyway): {failed}", file=sys.stderr
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
