"""Compile a warpgauge kernel for sm_90a on a machine without a GPU and report what matters:
global load widths in the PTX and SASS instruction counts (no timing).

    PYTHONPATH=src python experiments/compile_sm90.py skinny|int4dot|int4fma|int4grad|tile|tma [k=v ...]
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")


def compile_kernel(fn, sig, const, num_warps=4, num_stages=3, div16=(), maxnreg=None):
    """div16: argument names Triton would specialize as divisible by 16 (pointers always)."""
    sig = dict(sig)
    for c in const:
        sig[c] = "constexpr"
    names = list(fn.arg_names)
    attrs = {}
    for i, n in enumerate(names):
        if n in const:
            continue
        if sig[n].startswith("*") or n in div16:
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(
        fn=fn,
        signature={n: sig[n] for n in names},
        constexprs={(names.index(k),): v for k, v in const.items()},
        attrs=attrs,
    )
    opts = dict(num_warps=num_warps, num_stages=num_stages)
    if maxnreg:
        opts["maxnreg"] = maxnreg
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


def report(out, name):
    ptx = out.asm["ptx"]
    loads = collections.Counter(re.findall(r"(ld\.global[\.\w]*|cp\.async[\.\w]*)", ptx))
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(out.asm["cubin"])
    sass = subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", f.name], capture_output=True,
                          text=True).stdout  # fmt: skip
    ops = collections.Counter(
        m.group(1).split(".")[0]
        for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass)
    )
    res = subprocess.run([os.path.join(BIN, "cuobjdump"), "-res-usage", f.name], capture_output=True,
                         text=True).stdout  # fmt: skip
    regs = re.findall(r"REG:(\d+)", res)
    print(f"== {name}: regs {regs} shared {out.metadata.shared}")
    print("  ptx loads:", dict(loads))
    print("  sass total", sum(ops.values()), dict(ops.most_common(25)))
    return sass


def main():
    which = sys.argv[1]
    kv = dict(a.split("=") for a in sys.argv[2:])
    sys.path.insert(0, "src")
    if which == "skinny":
        from warpgauge.kernels import gemm_skinny as sk

        sig = {k: "*bf16" for k in ("a_ptr", "b_ptr", "c_ptr")}
        sig["p_ptr"] = "*fp32"
        for k in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm",
                  "stride_cn", "steps_per_split", "M_BUCKET", "K_BUCKET", "LAYOUT"):  # fmt: skip
            sig[k] = "i32"
        const = dict(BLOCK_M=16, BLOCK_N=int(kv.get("bn", 128)), BLOCK_K=int(kv.get("bk", 128)),
                     PARTIAL=True, HINTS=0, UPCAST=False, stride_ak=1, stride_bk=1)  # fmt: skip
        out = compile_kernel(
            sk.skinny_kernel,
            sig,
            const,
            4,
            int(kv.get("st", 4)),
            div16=("N", "K", "stride_am", "stride_bn", "stride_cm"),
        )
        # specialization of divisibility is not modelled here: N, K, strides treated as unknown
        report(out, which)
    elif which in ("int4dot", "int4fma"):
        from warpgauge.kernels import int4 as i4

        dt = kv.get("dt", "bf16")
        sig = {"x_ptr": f"*{dt}", "w_ptr": "*u8" if which == "int4dot" else "*i32",
               "s_ptr": f"*{dt}", "y_ptr": f"*{dt}", "part_ptr": "*fp32"}  # fmt: skip
        for k in ("M", "N", "K", "magic", "stride_xm", "stride_xk", "stride_wn", "stride_sn",
                  "stride_ym", "stride_yn"):  # fmt: skip
            sig[k] = "i32"
        bm = int(kv.get("bm", 16 if which == "int4dot" else 1))
        const = dict(GROUP=128, HALF_PAD=64, WPAD=16, BLOCK_M=bm, BLOCK_N=int(kv.get("bn", 64)),
                     GPI=int(kv.get("gpi", 1)), SPLIT_K=int(kv.get("split", 1)), X_BF16=dt == "bf16",
                     UPCAST=False, ASM=bool(int(kv.get("asm", 1))),
                     ONE_ROW=bool(int(kv.get("one", 0))), W_AS_B=bool(int(kv.get("wb", 0))),
                     stride_xk=1, stride_yn=1)  # fmt: skip
        out = compile_kernel(i4._int4_mm_kernel, sig, const, int(kv.get("w", 4)),
                             int(kv.get("st", 3)), div16=("N", "K", "stride_xm", "stride_wn",
                                                          "stride_sn", "stride_ym"))  # fmt: skip
        sass = report(out, which)
        if kv.get("dump"):
            with open(kv["dump"], "w") as f:
                f.write(sass)
    elif which == "int4grad":  # the grad-input kernel (int4.py int4_linear_grad_input_packed)
        from warpgauge.kernels import int4_kernels as ik

        sig = {"g_ptr": "*bf16", "w_ptr": "*u8", "s_ptr": "*bf16", "dx_ptr": "*bf16",
               "part_ptr": "*fp32"}  # fmt: skip
        for k in ("M", "N", "K", "N_CHUNK", "stride_gm", "stride_gn", "stride_wn", "stride_sn",
                  "stride_dm", "stride_dk"):  # fmt: skip
            sig[k] = "i32"
        const = dict(GROUP=128, HALF_PAD=64, BLOCK_M=int(kv.get("bm", 16)),
                     BLOCK_N=int(kv.get("bn", 128)), PARTIAL=bool(int(kv.get("partial", 1))),
                     X_BF16=True, UPCAST=False, FOLD=bool(int(kv.get("fold", 1))),
                     DECODE=int(kv.get("dec", 0)),
                     stride_gn=1, stride_dk=1)  # fmt: skip
        out = compile_kernel(ik._int4_grad_input_kernel, sig, const, int(kv.get("w", 4)),
                             int(kv.get("st", 3)), div16=("N", "K", "N_CHUNK", "stride_gm",
                                                          "stride_wn", "stride_sn", "stride_dm"))  # fmt: skip
        sass = report(out, which)
        if kv.get("dump"):
            with open(kv["dump"], "w") as f:
                f.write(sass)


if __name__ == "__main__":
    main()
