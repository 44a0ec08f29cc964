"""Compile the tile kernel of ``kernels/int4_tile.py`` for sm_90a without a GPU and report
registers, spills, shared memory and the pipelined loads (cp.async / TMA) of each config.

    PYTHONPATH=src python experiments/int4big_compile.py [bm,bn,warps,stages,mode,split ...]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from compile_sm90 import BIN, compile_kernel  # noqa: E402

from warpgauge.kernels.int4_tile import _int4_tile_kernel  # noqa: E402

DEFAULT = ["16,256,4,3,0,1", "16,128,4,4,0,1", "128,128,8,3,0,0", "128,128,8,3,1,0",
           "128,128,8,3,2,0", "128,64,4,3,0,0", "64,256,8,3,0,0", "128,256,8,3,1,0",
           "128,128,8,4,0,0", "64,128,8,3,0,1", "32,128,8,3,0,1"]  # fmt: skip


def one(cfg):
    parts = cfg.split(",")
    bm, bn, w, st, mode, split = (int(v) for v in parts[:6])
    tma = len(parts) > 6 and "t" in parts[6]
    sig = dict(x_ptr=f"tensordesc<bf16[{bm}, 64]>" if tma else "*bf16",
               w_ptr=f"tensordesc<u8[{bn}, 64]>" if tma else "*u8", s_ptr="*bf16", y_ptr="*bf16", part_ptr="*fp32",
               cnt_ptr="*i32")  # fmt: skip
    for k in ("M", "N", "K", "split_k", "stride_xm", "stride_xk", "stride_wn", "stride_sn",
              "stride_ym", "stride_yn"):  # fmt: skip
        sig[k] = "i32"
    w_as_b = bm <= 16
    const = dict(GROUP=128, BLOCK_M=bm, BLOCK_N=bn, HAS_SPLIT=split > 1, MODE=mode,
                 XPERM=not w_as_b, W_AS_B=w_as_b, FUSED=split > 1, TMA=tma, X_BF16=True, UPCAST=False,
                 ASM=True, STAGES=st, stride_xk=1, stride_yn=1)  # fmt: skip
    out = compile_kernel(_int4_tile_kernel, sig, const, num_warps=w, num_stages=st,
                         div16=("N", "K", "stride_xm", "stride_wn", "stride_sn", "stride_ym"))  # fmt: skip
    ptx = out.asm["ptx"]
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(out.asm["cubin"])
    res = subprocess.run([os.path.join(BIN, "cuobjdump"), "-res-usage", f.name],
                         capture_output=True, text=True).stdout  # fmt: skip
    regs = re.findall(r"REG:(\d+)", res)
    stack = re.findall(r"STACK:(\d+)", res)
    ca = len(re.findall(r"cp\.async\.cg|cp\.async\.ca", ptx))
    nbulk = len(re.findall(r"cp\.async\.bulk", ptx))
    wg = len(re.findall(r"wgmma\.mma_async", ptx))
    waits = len(re.findall(r"wgmma\.wait_group", ptx))
    print(f"{cfg:18} regs {regs} stack {stack} smem {out.metadata.shared} cp.async {ca} "
          f"bulk {nbulk} wgmma {wg} waits {waits}", flush=True)  # fmt: skip


if __name__ == "__main__":
    for c in sys.argv[1:] or DEFAULT:
        try:
            one(c)
        except Exception as exc:
            print(f"{c:18} ERROR {type(exc).__name__}: {str(exc)[:300]}", flush=True)
