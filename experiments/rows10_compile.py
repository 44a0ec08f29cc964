"""Compile the cooperative softmax / add_rms_norm kernels for sm_90a without a GPU: registers,
spills (ptxas), SASS instruction counts. rows10 (BF16 held chunks, poll backoff).

    PYTHONPATH=src python experiments/rows10_compile.py
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import triton  # noqa: E402
from compile_sm90 import compile_kernel, report  # noqa: E402


def softmax_coop(n, block, warps, fast=True, hold=False, nap=0, maxnreg=None):
    from warpgauge.kernels import softmax_coop as sc

    sig = {"x_ptr": "*bf16", "y_ptr": "*bf16", "slot_ptr": "*i64", "x_stride": "i32",
           "n_rows": "i32", "spin": "i32"}  # fmt: skip
    g = triton.cdiv(n // 8 * 8 if n % 8 else n, block)
    const = dict(N=n, BLOCK=block, G=g, GP=triton.next_power_of_2(g), ALIGN=n % 8 != 0,
                 S8=False, FAST=fast, ASM=fast, HOLD=hold, NAP=nap)  # fmt: skip
    out = compile_kernel(
        sc._softmax_coop, sig, const, warps, 3, div16=("x_stride",), maxnreg=maxnreg
    )
    report(
        out,
        f"softmax_coop N={n} {block}/{warps} fast={fast} hold={hold} nap={nap} maxnreg={maxnreg}",
    )
    print("  spills:", spills(out))
    return out


def spills(out):
    """ptxas's spill bytes (stack frame, spill stores/loads) from the compile's metadata/SASS."""
    sass_local = out.asm["ptx"].count("ld.local") + out.asm["ptx"].count("st.local")
    n_spills = getattr(out, "n_spills", None)
    return dict(n_spills=n_spills, ptx_local=sass_local, n_regs=getattr(out, "n_regs", None))


def main():
    for n, block, warps, hold, nap in [
        (131072, 4096, 4, False, 0), (131072, 4096, 4, True, 0), (131072, 4096, 4, True, 200),
        (131072, 8192, 8, True, 0), (131072, 8192, 4, True, 0), (131072, 16384, 8, True, 0),
        (131072, 16384, 16, True, 0), (151936, 8192, 8, True, 0), (131072, 8192, 8, False, 0),
    ]:  # fmt: skip
        softmax_coop(n, block, warps, hold=hold, nap=nap)


if __name__ == "__main__":
    main()


def rms_coop(n, block, warps, maxnreg=None):
    from warpgauge.kernels import rmsnorm as rk

    sig = {"x_ptr": "*bf16", "r_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16",
           "h_ptr": "*bf16", "slot_ptr": "*i64", "x_stride": "i32", "r_stride": "i32",
           "n_rows": "i32", "eps": "fp32", "spin": "i32"}  # fmt: skip
    g = triton.cdiv(n // 8 * 8 if n % 8 else n, block)
    const = dict(N=n, BLOCK=block, G=g, GP=triton.next_power_of_2(g), ALIGN=n % 8 != 0,
                 S8=False, W_EARLY=False)  # fmt: skip
    out = compile_kernel(
        rk._rms_coop, sig, const, warps, 3, div16=("x_stride", "r_stride"), maxnreg=maxnreg
    )
    report(out, f"rms_coop N={n} {block}/{warps} maxnreg={maxnreg}")
    return out


def softmax_coop_loop(n, block, warps, sub, maxnreg=None, stages=None):
    from warpgauge.kernels import softmax_coop as sc

    sig = {"x_ptr": "*bf16", "y_ptr": "*bf16", "slot_ptr": "*i64", "x_stride": "i32",
           "n_rows": "i32", "spin": "i32"}  # fmt: skip
    g = triton.cdiv(n // 8 * 8 if n % 8 else n, block)
    const = dict(N=n, BLOCK=block, SUB=sub, G=g, GP=triton.next_power_of_2(g), ALIGN=n % 8 != 0,
                 S8=False, STAGES=stages, EV_KEEP="evict_last", EV_DROP="evict_first", FMA=0,
                 FAST=True, ASM=True)  # fmt: skip
    out = compile_kernel(
        sc._softmax_coop_loop, sig, const, warps, 3, div16=("x_stride",), maxnreg=maxnreg
    )
    report(out, f"softmax_coop_loop N={n} {block}/{warps} sub={sub} maxnreg={maxnreg}")
    return out
