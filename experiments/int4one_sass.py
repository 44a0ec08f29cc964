"""Compile the pipelined batch-1 INT4 FMA GEMV for sm_90a without a GPU and count the SASS of its
main loop per weight value, for the exact and the folded decodes (``int4.FMA_FOLD``).

    PYTHONPATH=src python experiments/int4one_sass.py [fold=0,1] [bn=32] [gpi=4] [w=2] [st=3]
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_sm90 import compile_kernel  # noqa: E402
from int4_sass import loop_mix  # noqa: E402


def main():
    kv = dict(a.split("=") for a in sys.argv[1:])
    sys.path.insert(0, "src")
    from warpgauge.kernels import int4_gemv as g

    dt = kv.get("dt", "bf16")
    bn, gpi, w, st = (int(kv.get(k, d)) for k, d in (("bn", 32), ("gpi", 4), ("w", 2), ("st", 3)))
    for fold in (int(f) for f in kv.get("fold", "0,1").split(",")):
        sig = {"x_ptr": f"*{dt}", "w_ptr": "*i32", "s_ptr": f"*{dt}", "y_ptr": f"*{dt}",
               "part_ptr": "*fp32", "cnt_ptr": "*i32"}  # fmt: skip
        for k in ("M", "N", "K", "magic", "stride_xm", "stride_xk", "stride_wn", "stride_sn",
                  "stride_ym", "stride_yn"):  # fmt: skip
            sig[k] = "i32"
        const = dict(GROUP=128, WPAD=16, BLOCK_N=bn, GPI=gpi, SPLIT_K=int(kv.get("split", 1)),
                     STAGES=st, FOLD=bool(fold), FUSED=bool(int(kv.get("fused", 0))),
                     stride_xk=1, stride_yn=1)  # fmt: skip
        out = compile_kernel(
            g._int4_gemv_pipe_kernel,
            sig,
            const,
            w,
            st,
            div16=("N", "K", "stride_xm", "stride_wn", "stride_sn", "stride_ym"),
        )
        sass = out.asm.get("sass") or ""
        if not sass:
            import subprocess  # noqa: E401
            import tempfile

            from compile_sm90 import BIN

            with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
                f.write(out.asm["cubin"])
            sass = subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", f.name],
                                  capture_output=True, text=True).stdout  # fmt: skip
        n, ops = loop_mix(sass)
        values = bn * 128 * gpi
        regs = out.n_regs if hasattr(out, "n_regs") else "?"
        print(f"fold={fold} bn={bn} gpi={gpi} w={w} st={st}: loop {n} instr/thread/iter, "
              f"{n * 32 * w / values:.2f} per weight value, regs {regs};",
              dict(ops.most_common(12)))  # fmt: skip


if __name__ == "__main__":
    main()
