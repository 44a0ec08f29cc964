"""A driver for ``compute-sanitizer``: every operator, forward and backward, on every plan.

Run it under a sanitizer tool (``scripts/sanitize.sh`` does all three)::

    compute-sanitizer --tool memcheck python -m warpgauge.tools.sanitize_driver --size small

Each case prints ``case <operator>: <what>`` before it launches and ``ok`` (or the error) after,
so a sanitizer report can be matched to the operator that caused it. Every result is also checked
against the FP64 reference: a case that runs clean but computes the wrong numbers fails too.
Outputs are poisoned (NaN) so an unwritten element fails the check.

Shapes are small (a sanitizer slows each kernel by 10-100x) but reach every plan: resident,
looped, split and cooperative row plans are forced with ``plan=`` (the cooperative plan is
forward only; its cases run the backward on the automatic rule); the GEMM runs odd M/N/K, transposed and
sliced operands; INT4 runs the FMA GEMV, the tensor-core GEMV and the tiled path, each with and
without split-K, and its input gradient. ``--size tiny`` is for racecheck/initcheck (slower).

Exit status: 0 when every case passed, 1 when one failed (the failures are listed last).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable

os.environ.setdefault("WARPGAUGE_POISON_OUTPUTS", "1")


def _cases(size: str):
    """(operator, description, thunk) triples; each thunk runs and checks one case."""
    import torch

    import warpgauge as wg
    from warpgauge.kernels import rmsnorm as rms_k
    from warpgauge.kernels import row_sum as row_sum_k
    from warpgauge.kernels import softmax as softmax_k
    from warpgauge.kernels.int4 import Int4Plan, int4_linear, int4_linear_grad_input
    from warpgauge.kernels.plans import RowPlan
    from warpgauge.reference import (
        add_ref,
        add_rms_norm_ref,
        assert_close,
        gemm_ref,
        int4_linear_ref,
        row_sum_ref,
        softmax_bwd_ref,
        softmax_ref,
    )

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape, dtype=torch.bfloat16, scale=1.0):
        return (torch.randn(*shape, generator=g, device=dev) * scale).to(dtype)

    tiny = size == "tiny"
    width = 300 if tiny else 2053
    rows = 3 if tiny else 37
    plans = {
        "resident": RowPlan.resident(width),
        "looped": RowPlan.looped(128 if tiny else 512),
        "split": RowPlan("split", 64 if tiny else 256, 2, split=3),
        # forward only: the programs of a row exchange statistics through L2 slots
        "coop": RowPlan.coop(128 if tiny else 512, 4),
        # the looped cooperative plan (softmax_coop.py, rmsnorm_coop.py): chunks walked in slices
        "coop_sub": RowPlan.coop(128 if tiny else 512, 2, sub=32 if tiny else 128, evict=True),
    }
    out: list[tuple[str, str, Callable[[], None]]] = []

    for dtype in (torch.bfloat16, torch.float32):
        for pname, plan in plans.items():
            tag = f"{rows}x{width} {str(dtype)[6:]} plan={pname}"
            bplan = None if plan.kind == "coop" else plan  # the backward's own rule

            def softmax_case(plan=plan, bplan=bplan, dtype=dtype):
                x = rand(rows, 2 * width, dtype=dtype, scale=4.0)[:, :width]  # strided rows
                x[0, : width // 2] = float("-inf")
                x[1] = float("-inf")
                y = softmax_k.softmax(x, plan=plan)
                assert_close(y, softmax_ref(x), relative=True, msg="softmax")
                dy = rand(rows, width, dtype=dtype)
                dx = softmax_k.softmax_backward(y, dy, plan=bplan)
                assert_close(dx, softmax_bwd_ref(y, dy), msg="softmax backward")

            def rms_case(plan=plan, bplan=bplan, dtype=dtype):
                x = rand(rows, 2 * width, dtype=dtype)[:, width:]
                r = rand(rows, width, dtype=dtype)
                w = rand(width, dtype=dtype)
                y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=plan)
                y_ref, h_ref = add_rms_norm_ref(x, r, w)
                assert_close(h, h_ref, msg="h")
                assert_close(y, y_ref, msg="y")
                dy, dh = rand(rows, width, dtype=dtype), rand(rows, width, dtype=dtype)
                for dh_arg in (None, dh):
                    dx, dw = rms_k.add_rms_norm_backward(dy, dh_arg, h, w, 1e-6, plan=bplan)
                    h64 = h.double().requires_grad_(True)
                    w64 = w.double().requires_grad_(True)
                    rstd = torch.rsqrt(h64.square().mean(-1, keepdim=True) + 1e-6)
                    (h64 * rstd * w64).backward(dy.double())
                    dx_ref = h64.grad + (dh.double() if dh_arg is not None else 0)
                    assert_close(dx, dx_ref.to(dtype), msg="rms dx")
                    assert_close(dw, w64.grad.to(dtype), msg="rms dw")

            def row_sum_case(plan=plan, dtype=dtype):
                x = rand(rows, width, dtype=dtype)
                assert_close(row_sum_k.row_sum(x, plan=plan), row_sum_ref(x), msg="row_sum")

            out += [
                ("softmax", f"forward+backward {tag}", softmax_case),
                ("add_rms_norm", f"forward+backward (dh none/given) {tag}", rms_case),
                ("row_sum", f"forward {tag}", row_sum_case),
            ]

    # session 9's plans (forced here; the rule picks them at larger shapes): softmax's ex2 exps
    # with the relaxed statistics publish (register and looped cooperative chunks, persistent
    # resident), row_sum's persistent tiles, add_rms_norm's early weight load
    fast = {
        "coop_fast": RowPlan.coop(128 if tiny else 512, 4, fast_exp=True),
        "coop_sub_fast": RowPlan.coop(
            128 if tiny else 512, 2, sub=32 if tiny else 128, evict=True, fast_exp=True
        ),  # fmt: skip
        "persistent_fast": RowPlan(
            "resident", 512 if tiny else 2048, 4, programs_per_sm=1, fast_exp=True
        ),  # fmt: skip
    }
    for pname, plan in fast.items():
        w = width if plan.kind == "coop" else plan.block - 5  # a resident plan covers its block

        def softmax_fast_case(plan=plan, w=w):
            x = rand(rows, 2 * w, scale=4.0)[:, :w]
            x[0, : w // 2] = float("-inf")
            x[1] = float("-inf")
            assert_close(softmax_k.softmax(x, plan=plan), softmax_ref(x), relative=True,
                         msg="softmax fast_exp")  # fmt: skip

        out.append(("softmax", f"forward {rows}x{w} plan={pname}", softmax_fast_case))
    rs_body = 512 if tiny else 2048

    def row_sum_persistent_case():
        plan = RowPlan("resident", rs_body, 4, programs_per_sm=2)
        x = rand(rows * 5, rs_body - 3)
        assert_close(row_sum_k.row_sum(x, plan=plan), row_sum_ref(x), msg="row_sum persistent")

    out.append(
        ("row_sum", f"forward {rows * 5}x{rs_body - 3} persistent tiles", row_sum_persistent_case)
    )

    def rms_w_early_case():
        plan = RowPlan("resident", rs_body, 4, w_early=True)
        x, r, w = rand(rows, rs_body - 3), rand(rows, rs_body - 3), rand(rs_body - 3)
        y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=plan)
        y_ref, h_ref = add_rms_norm_ref(x, r, w)
        assert_close(h, h_ref, msg="h")
        assert_close(y, y_ref, msg="y w_early")

    out.append(("add_rms_norm", f"forward {rows}x{rs_body - 3} w_early", rms_w_early_case))

    def add_case():
        for n in (1, 257, 1024, 1025, 1000 if tiny else 100003):  # 257-1024: the small blocks
            x, y = rand(n), rand(n)
            assert_close(wg.add(x, y), add_ref(x, y), msg="add flat")
        x = rand(rows, 2 * width)[:, :width]
        y = rand(rows, width)
        assert_close(wg.add(x, y), add_ref(x, y), msg="add strided rows")
        xs = x.detach().requires_grad_(True)
        wg.add(xs, y).sum().backward()
        assert torch.equal(xs.grad, torch.ones_like(xs))

    out.append(("add", "forward (flat, strided rows) + backward", add_case))

    # Each GEMM case pins one autotuning config (case i runs config i mod 8) so that every tile is
    # sanitized without the autotuner benchmarking all eight under the sanitizer for each case.
    from warpgauge.kernels import gemm as gemm_mod

    gemm_kernels = list(gemm_mod._KERNELS.values())
    all_configs = [list(getattr(k, "configs", [])) for k in gemm_kernels]
    gemm_shapes = [(1, 17, 33), (65, 127, 255)] if tiny else [(1, 64, 4096), (127, 255, 65)]
    gemm_shapes += [] if tiny else [(300, 520, 1000)]
    i = 0
    for M, N, K in gemm_shapes:
        for layout in ("nn", "tn", "nt", "sliced"):
            pick = i % max(1, len(all_configs[0]))
            i += 1
            cfg = all_configs[0][pick] if all_configs[0] else None

            def gemm_case(M=M, N=N, K=K, layout=layout, pick=pick):
                saved = [getattr(k, "configs", None) for k in gemm_kernels]
                try:
                    for k, cfgs in zip(gemm_kernels, all_configs):
                        if cfgs:
                            k.configs = [cfgs[pick]]
                    a = rand(M, K) if layout[0] != "t" else rand(K, M).t()
                    b = rand(K, N) if layout[-1] != "t" or layout == "sliced" else rand(N, K).t()
                    if layout == "sliced":
                        a = rand(M, K + 7)[:, 3 : K + 3]
                    c = wg.gemm(a, b)
                    assert_close(c, gemm_ref(a, b), msg="gemm")
                    aa, bb = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
                    gr = rand(M, N)
                    wg.gemm(aa, bb).backward(gr)
                    assert_close(aa.grad, gemm_ref(gr, b.t()), msg="gemm dA")
                    assert_close(bb.grad, gemm_ref(a.t(), gr), msg="gemm dB")
                finally:
                    for k, c in zip(gemm_kernels, saved):
                        if c is not None:
                            k.configs = c

            tile = "" if cfg is None else f" tile {cfg.kwargs} warps={cfg.num_warps}"
            out.append(("gemm", f"forward+backward {M}x{N}x{K} {layout}{tile}", gemm_case))

    N, K = (96, 256) if tiny else (1000, 128 * 13)
    int4_plans = [
        Int4Plan(block_m=1, block_n=64, groups_per_iter=1, split_k=1, num_warps=2, num_stages=1),
        Int4Plan(block_m=1, block_n=32, groups_per_iter=2, split_k=3, num_warps=2, num_stages=1),
        Int4Plan(block_m=16, block_n=64, split_k=1),
        Int4Plan(block_m=16, block_n=64, split_k=2),
        Int4Plan(block_m=64, block_n=128, split_k=1, num_warps=8),
        Int4Plan(block_m=64, block_n=128, split_k=2, num_warps=8),
        # the pipelined GEMVs (kernels/int4_gemv.py): FMA (the batch-1 default) and tensor-core
        Int4Plan(block_m=1, block_n=32, groups_per_iter=4, split_k=1, num_warps=2, pipeline=3),
        Int4Plan(block_m=1, block_n=32, groups_per_iter=4, split_k=2, num_warps=2, pipeline=3),
        Int4Plan(block_m=16, block_n=64, groups_per_iter=2, split_k=2, num_warps=4, pipeline=3),
        # the tile kernel (kernels/int4_tile.py, batch 2-256): split-K reduced in the kernel by
        # the last split of each tile (per-tile counters in a persistent workspace), TMA loads
        Int4Plan(block_m=16, block_n=64, groups_per_iter=2, split_k=3, kernel="tile", fused=True),
        Int4Plan(
            block_m=64, block_n=128, split_k=2, num_warps=8, kernel="tile", fused=True, tma=True
        ),  # fmt: skip
    ]
    for plan in int4_plans:
        for M in (1, 5) if plan.block_m <= 16 else (70,):

            def int4_case(plan=plan, M=M):
                qw = wg.quantize_int4(rand(N, K, scale=0.05))
                x = rand(M, K)
                y = int4_linear(x, qw, plan=plan)
                assert_close(y, int4_linear_ref(x, qw.dequantize(torch.float32)), msg="int4")

            out.append(("int4_linear", f"forward M={M} N={N} K={K} {plan}", int4_case))

    def int4_grad_case():
        qw = wg.quantize_int4(rand(N, K, scale=0.05))
        w32 = qw.dequantize(torch.float32)
        for M in (1, 5, 40):
            gr = rand(M, N)
            ref = (gr.double() @ w32.double()).to(gr.dtype)
            assert_close(int4_linear_grad_input(gr, qw), ref, msg="int4 grad_input")

    out.append(("int4_linear", f"backward (grad_input) M=1,5,40 N={N} K={K}", int4_grad_case))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m warpgauge.tools.sanitize_driver")
    p.add_argument("--size", choices=("small", "tiny"), default="small")
    p.add_argument("--only", default=None, help="comma-separated operator names to run")
    p.add_argument("--shard", default="0/1", help="i/n: run cases i, i+n, i+2n, ... only")
    p.add_argument("--list", action="store_true", help="print the cases and exit")
    a = p.parse_args(argv)
    cases = _cases(a.size)
    if a.only:
        keep = set(a.only.split(","))
        cases = [c for c in cases if c[0] in keep]
    shard, shards = (int(v) for v in a.shard.split("/"))
    cases = cases[shard::shards]
    if a.list:
        for op, what, _ in cases:
            print(f"{op}: {what}")
        return 0
    failed = []
    ops_seen: dict[str, int] = {}
    t0 = time.perf_counter()
    for op, what, fn in cases:
        print(f"case {op}: {what}", flush=True)
        try:
            fn()
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()
            print("  ok", flush=True)
            ops_seen[op] = ops_seen.get(op, 0) + 1
        except Exception as e:  # report every failure; the exit status says it failed
            print(f"  FAILED: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
            failed.append(f"{op}: {what}")
    dt = time.perf_counter() - t0
    print(f"operators: {', '.join(f'{k} ({v} cases)' for k, v in ops_seen.items())}")
    print(f"{len(cases) - len(failed)}/{len(cases)} cases passed in {dt:.1f} s")
    for f in failed:
        print(f"FAILED {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
