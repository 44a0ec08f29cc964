"""Compile the INT4 kernel for sm_90a without a GPU and count the SASS of its main loop.

    PYTHONPATH=src python experiments/int4_sass.py bm=16 bn=128 w=4 st=3 asm=1 wb=1 hv=1 fold=0

Prints the per-thread instruction mix of the loop that holds the HMMA / FFMA work and the
instructions per weight value (the ALU budget at the memory limit is ~3.9 per value on the H200).
"""

from __future__ import annotations

import collections
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_sm90 import compile_kernel, report  # noqa: E402


def loop_mix(sass: str):
    """Instruction mix of the longest backward branch's body (the main loop)."""
    lines = re.findall(r"/\*([0-9a-f]{4})\*/\s+((?:@!?U?P\w+\s+)?[A-Z][^;]*);", sass)
    addr = [(int(a, 16), ins) for a, ins in lines]
    best = None
    for a, ins in addr:
        m = re.search(r"BRA (0x[0-9a-f]+)", ins)
        if m and int(m.group(1), 16) < a:
            lo = int(m.group(1), 16)
            if best is None or a - lo > best[1] - best[0]:
                best = (lo, a)
    if best is None:
        return None, collections.Counter()
    body = [ins for a, ins in addr if best[0] <= a <= best[1]]
    ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", i).split()[0] for i in body)
    return len(body), ops


def main():
    kv = dict(a.split("=") for a in sys.argv[1:])
    sys.path.insert(0, "src")
    from warpgauge.kernels import int4 as i4

    dt = kv.get("dt", "bf16")
    bm = int(kv.get("bm", 16))
    sig = {"x_ptr": f"*{dt}", "w_ptr": "*u8" if bm > 1 else "*i32", "s_ptr": f"*{dt}",
           "y_ptr": f"*{dt}", "part_ptr": "*fp32"}  # fmt: skip
    for k in ("M", "N", "K", "magic", "stride_xm", "stride_xk", "stride_wn", "stride_sn",
              "stride_ym", "stride_yn"):  # fmt: skip
        sig[k] = "i32"
    bn = int(kv.get("bn", 64))
    const = dict(GROUP=128, HALF_PAD=64, WPAD=16, BLOCK_M=bm, BLOCK_N=bn,
                 GPI=int(kv.get("gpi", 1)), SPLIT_K=int(kv.get("split", 1)), X_BF16=dt == "bf16",
                 UPCAST=False, ASM=bool(int(kv.get("asm", 1))),
                 ONE_ROW=bool(int(kv.get("one", 0))), W_AS_B=bool(int(kv.get("wb", 0))),
                 HALVES=bool(int(kv.get("hv", 0))), FOLD=bool(int(kv.get("fold", 0))),
                 stride_xk=1, stride_yn=1)  # fmt: skip
    out = compile_kernel(i4._int4_mm_kernel, sig, const, int(kv.get("w", 4)),
                         int(kv.get("st", 3)), div16=("N", "K", "stride_xm", "stride_wn",
                                                      "stride_sn", "stride_ym"))  # fmt: skip
    sass = report(out, str(kv))
    n, ops = loop_mix(sass)
    threads = 32 * int(kv.get("w", 4))
    values = bn * 128 * (int(kv.get("gpi", 1)) if bm == 1 else 1)
    if n:
        print(
            f"  loop: {n} instr/thread/iter, {n * threads / values:.2f} per weight value;",
            dict(ops.most_common(14)),
        )
    if kv.get("ttgir"):
        with open(kv["ttgir"], "w") as f:
            f.write(out.asm["ttgir"])
    if kv.get("dump"):
        with open(kv["dump"], "w") as f:
            f.write(sass)


if __name__ == "__main__":
    main()
