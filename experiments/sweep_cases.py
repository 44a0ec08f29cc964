"""Cases of gemm_int4_sweep.py: each a dict with group, shape, variant, baseline flag and a
``build() -> (fn, check)`` whose ``check(out)`` returns max|out - ref| / max|ref|."""

from __future__ import annotations

import math

import torch
import triton

from warpgauge.kernels import gemm as gm
from warpgauge.kernels import gemm_skinny as sk
from warpgauge.kernels import gemm_tma as tm
from warpgauge.kernels import int4 as i4

torch.backends.cuda.matmul.allow_tf32 = False
DT = torch.bfloat16
_CACHE = {}


def _cached(key, make):
    if key not in _CACHE:
        _CACHE.clear()
        torch.cuda.empty_cache()
        _CACHE[key] = make()
    return _CACHE[key]


def _rel(out, ref):
    out = out.float()
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def _sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


# ------------------------------------------------------------------------------------------ GEMM


def _operands(M, N, K, layout, copies):
    g = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K)

    def r(*s):
        return torch.randn(*s, generator=g, device="cuda").to(DT)

    a = r(K, M).t() if layout[0] == "T" else r(M, K)
    if layout == "sliced":
        a = r(M, K + 16)[:, 8 : 8 + K]
        b = r(K, N + 16)[:, 8 : 8 + N]
    elif layout[1] == "T":
        b = r(N, K).t()
    else:
        b = r(K, N)
    bs = [b] + [b.clone() if b.is_contiguous() else b.t().clone().t() for _ in range(copies - 1)]
    ref = a.float() @ b.float()
    return a, bs, ref


def _rotating(bs, call):
    state = {"i": 0}

    def fn():
        b = bs[state["i"] % len(bs)]
        state["i"] += 1
        return call(b)

    return fn


def gemm_case(M, N, K, layout, variant, l2):
    copies = 1
    if M <= 64:  # memory-bound on B: rotate copies so B streams from DRAM
        copies = min(16, max(1, math.ceil(2.5 * l2 / (K * N * 2))))

    def build():
        a, bs, ref = _cached(
            ("g", M, N, K, layout, copies), lambda: _operands(M, N, K, layout, copies)
        )
        c = torch.empty(M, N, dtype=DT, device="cuda")
        kind, _, opt = variant.partition(":")
        if kind == "cublas":
            call = lambda b: torch.mm(a, b)  # noqa: E731
        elif kind == "auto":
            call = lambda b: gm.gemm(a, b)  # noqa: E731
        elif kind == "ptr":
            bm, bn, bk, st, w, use_h = (int(v) for v in opt.split(","))

            def call(b):
                h = gm.hints(a, b, c) if use_h else 0
                grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
                gm._KERNELS["m"].fn[grid](
                    a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                    c.stride(0), c.stride(1), 1, 1, 0,
                    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, UPCAST=False, HINTS=h,
                    num_warps=w, num_stages=st,
                )  # fmt: skip
                return c
        elif kind == "padtma" and tm.eligible(a, bs[0], c) and opt.split(",")[-1] != "force":
            raise ValueError("aligned: padtma is the same as tma")
        elif kind in ("tma", "padtma"):
            force = opt.endswith(",force")
            bm, bn, bk, st, w, pers, ws = (int(v) for v in opt.split(",")[:7])
            pads = {}

            def call(b):
                aa, bb, cc = a, b, c
                if kind == "padtma":  # copy unaligned operands into 16-byte aligned rows
                    aa = _pad_copy(a, pads, "a", force)
                    bb = _pad_copy(b, pads, "b", force)
                    cc = _pad_out(c, pads)
                ad, bd, cd, at, bt = tm.descriptors(aa, bb, cc)
                meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, A_T=at, B_T=bt,
                            PERSISTENT=bool(pers), WS=bool(ws), UPCAST=False)  # fmt: skip
                tm.set_block_shapes(dict(meta, a_desc=ad, b_desc=bd, c_desc=cd))
                tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
                grid = (min(tiles, _sms()),) if pers else (tiles,)
                tm.tma_kernel[grid](ad, bd, cd, M, N, K, 1, 1, 0,
                                    num_warps=w, num_stages=st, **meta)  # fmt: skip
                if kind == "padtma":
                    c.copy_(cc)
                return c
        elif kind == "skinny":
            bm, bn, bk, split, st, w = (int(v) for v in opt.split(","))
            bm = max(bm, 16, triton.next_power_of_2(M))
            plan = sk.SkinnyPlan(bm, bn, bk, split, w, st)
            part = torch.empty(split, M, N, dtype=torch.float32, device="cuda")

            def call(b):
                h = gm.hints(a, b, c) & 0xBF
                sk.skinny_kernel[plan.grid(M, N)](
                    a, b, c, part, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                    c.stride(0), c.stride(1), plan.steps_per_split(K), 1, 1, 0,
                    BLOCK_M=plan.block_m, BLOCK_N=bn, BLOCK_K=bk, PARTIAL=split > 1, HINTS=h,
                    UPCAST=False, num_warps=w, num_stages=st,
                )  # fmt: skip
                if split > 1:
                    sk.reduce_kernel[(triton.cdiv(M * N, 1024),)](
                        part, c, M, N, split, c.stride(0), c.stride(1), BLOCK=1024
                    )
                return c
        else:
            raise ValueError(variant)
        return _rotating(bs, call), lambda out: _rel(out, ref)

    key = f"{variant}|{layout}|{N % 16}|{K % 16}|{M % 16 if layout[0] == 'T' else 0}"
    return dict(group="gemm" if M > 64 else "skinny", shape=f"{M}x{N}x{K} {layout}",
                variant=variant, baseline=variant == "cublas", build=build,
                compile_key=key)  # fmt: skip


def _pad_copy(t, pads, name, force=False):
    if tm.aligned(t) and not force:
        return t
    if name not in pads:
        r, cdim = t.shape
        cp = (cdim + 7) // 8 * 8
        pads[name] = torch.empty(r, cp, dtype=t.dtype, device=t.device)[:, :cdim]
    pads[name].copy_(t)
    return pads[name]


def _pad_out(c, pads):
    if tm.aligned(c):
        return c
    if "c" not in pads:
        r, cdim = c.shape
        pads["c"] = torch.empty(r, (cdim + 7) // 8 * 8, dtype=c.dtype, device=c.device)[:, :cdim]
    return pads["c"]


def gemm_cases(l2):
    out = []
    big = [
        (4096, 4096, 4096, "NN"), (4096, 4104, 4096, "NN"), (4095, 4095, 4095, "NN"),
        (4096, 4096, 4095, "NN"), (4095, 4096, 4096, "NN"), (4096, 4095, 4096, "NN"),
        (4096, 4096, 4104, "NN"), (4104, 4096, 4096, "NN"), (2048, 2056, 2048, "NN"),
        (4096, 4096, 4096, "NT"), (4096, 4104, 4096, "NT"), (4096, 4096, 4096, "TN"),
        (4096, 14336, 4096, "NT"), (1024, 1024, 1024, "NN"), (2048, 2048, 2048, "NN"),
        (8192, 8192, 8192, "NN"), (16384, 1024, 1024, "NN"), (4096, 4096, 4096, "sliced"),
        (1000, 768, 520, "NN"), (2047, 2047, 2047, "NT"),
    ]  # fmt: skip
    for M, N, K, lay in big:
        v = ["cublas", "ptr:128,256,64,3,8,0", "ptr:128,256,64,3,8,1", "ptr:128,128,64,4,8,1"]
        v += ["tma:128,256,64,3,8,0,0", "tma:128,128,64,4,8,0,0", "tma:128,256,64,3,8,1,0",
              "tma:128,256,64,3,8,0,1", "padtma:128,256,64,3,8,0,0"]  # fmt: skip
        if (M, N, K, lay) in [(4096, 4096, 4096, "NN"), (4096, 4104, 4096, "NN"),
                              (4095, 4095, 4095, "NN"), (4096, 14336, 4096, "NT")]:  # fmt: skip
            v.append("auto")
        out += [gemm_case(M, N, K, lay, x, l2) for x in v]
    for M in (1, 16, 64, 8, 32):
        for N, K in ((4096, 4096), (14336, 4096), (4096, 14336), (1024, 8192)):
            if M in (8, 32) and (N, K) != (4096, 4096):
                continue
            v = ["cublas", "ptr:64,128,64,4,4,1"]
            for bn, bk, st in ((64, 128, 4), (128, 128, 4), (128, 64, 4)):
                for split in (1, 2, 4, 8, 16):
                    v.append(f"skinny:16,{bn},{bk},{split},{st},4")
            out += [gemm_case(M, N, K, "NT", x, l2) for x in v]
        if M in (1, 16):
            out += [gemm_case(M, 4096, 4096, "NN", x, l2)
                    for x in ("cublas", "skinny:16,128,128,4,4,4", "skinny:16,64,128,8,4,4")]  # fmt: skip
    return out


# ------------------------------------------------------------------------------------------ INT4


def _int4_operands(N, K, copies):
    g = torch.Generator(device="cuda").manual_seed(N + K)
    packed = torch.randint(0, 256, (N, K // 2), generator=g, device="cuda", dtype=torch.uint8)
    scales = (torch.rand(N, K // 128, generator=g, device="cuda") * 0.02 + 0.001).to(DT)
    from warpgauge.quant import Int4Weight

    qw = Int4Weight(packed, scales, (N, K), 128)
    w32 = qw.dequantize(torch.float32)
    return qw, w32, copies


def int4_case(M, N, K, variant, l2):
    wbytes = N * K // 2 + N * K // 128 * 2
    copies = min(16, max(1, math.ceil(2.5 * l2 / wbytes)))

    def build():
        qw, w32, _ = _cached(("i", N, K), lambda: _int4_operands(N, K, copies))
        g = torch.Generator(device="cuda").manual_seed(M)
        x = torch.randn(M, K, generator=g, device="cuda").to(DT)
        ref = x.float() @ w32.T
        kind, _, opt = variant.partition(":")
        if kind == "tinygemm":
            from warpgauge.bench.providers import tinygemm_layout

            packs = [tinygemm_layout(qw) for _ in range(copies)]
            mm = torch.ops.aten._weight_int4pack_mm
            call = lambda p: mm(x, p[0], p[1], p[2])  # noqa: E731
        elif kind == "dense":
            wd = qw.dequantize(DT)
            packs = [wd] + [wd.clone() for _ in range(max(1, math.ceil(copies / 4)) - 1)]
            call = lambda w: torch.nn.functional.linear(x, w)  # noqa: E731
        else:
            packs = [(qw.packed, qw.scales)]
            packs += [(qw.packed.clone(), qw.scales.clone()) for _ in range(copies - 1)]
            if kind == "wg":
                plan, asm = None, False
            else:
                bm, bn, gpi, split, w, st, asm = (int(v) for v in opt.split(","))
                plan = i4.Int4Plan(block_m=bm, block_n=bn, groups_per_iter=gpi, split_k=split,
                                   num_warps=w, num_stages=st)  # fmt: skip

            def call(p):  # asm bits: 1 PTX decode, 2 one-row x broadcast, 4 weight as dot B
                i4.USE_ASM_DECODE, i4.ONE_ROW_BROADCAST = bool(asm & 1), bool(asm & 2)
                i4.WEIGHT_AS_B = bool(asm & 4)
                try:
                    return i4.int4_linear_packed(x, p[0], p[1], 128, plan)
                finally:
                    i4.USE_ASM_DECODE = i4.ONE_ROW_BROADCAST = i4.WEIGHT_AS_B = False

        return _rotating(packs, call), lambda out: _rel(out, ref)

    return dict(group=f"int4_m{M}" if M <= 16 else "int4_big", shape=f"{M}x{N}x{K}",
                variant=variant, baseline=kind_of(variant) in ("tinygemm", "dense"),
                build=build, tol=1e-2, compile_key=variant)  # fmt: skip


def kind_of(v):
    return v.partition(":")[0]


def int4_cases(l2):
    out = []
    shapes = [(28672, 8192), (8192, 8192), (128256, 4096), (14336, 4096), (4096, 14336),
              (4096, 4096)]  # fmt: skip
    for M in (1, 4, 16):
        for N, K in shapes:
            v = ["tinygemm", "dense", "wg"]
            if M == 1:
                for bn, w, gpi in ((64, 2, 1), (64, 4, 1), (128, 4, 1), (32, 2, 1), (64, 2, 2)):
                    for split in (1, 2, 4):
                        v.append(f"p:1,{bn},{gpi},{split},{w},1,0")
            dots = [(64, 3, 0), (64, 3, 1), (128, 3, 1), (32, 3, 1)]
            if M == 1:
                dots += [(64, 3, 3), (128, 3, 3)]
            for bn, st, asm in dots:
                for split in (1, 2, 4, 8):
                    v.append(f"p:16,{bn},1,{split},4,{st},{asm}")
            out += [int4_case(M, N, K, x, _l2) for x in v for _l2 in (l2,)]
    for M in (64, 256):
        for N, K in ((28672, 8192), (4096, 14336), (8192, 8192)):
            v = ["tinygemm", "dense", "wg"]
            for bm, bn, w in ((64, 128, 8), (128, 128, 8), (64, 64, 4)):
                if bm > max(64, M):
                    continue
                for asm in (0, 1):
                    for split in (1, 2):
                        v.append(f"p:{bm},{bn},1,{split},{w},3,{asm}")
            out += [int4_case(M, N, K, x, l2) for x in v]
    return out


def all_cases(only, l2, which="explore"):
    if which == "final":
        return [c for c in final_cases(l2) if only in ("", c["group"].split("_")[0])]
    if which == "explore2":
        return explore2_cases(l2)
    return explore_cases(only, l2)


def explore_cases(only, l2):
    """Priority order (the timing loop stops at its budget): INT4 batch 1, big GEMMs, skinny GEMMs,
    INT4 batch 4/16, INT4 large batches."""
    i4c = int4_cases(l2) if only in ("", "int4") else []
    gc = gemm_cases(l2) if only in ("", "gemm") else []
    first = [c for c in i4c if c["group"] == "int4_m1"]
    rest = [c for c in i4c if c["group"] != "int4_m1"]
    big = [c for c in gc if c["group"] == "gemm"]
    skinny = [c for c in gc if c["group"] == "skinny"]
    return first + big + skinny + rest


# ------------------------------------------------------------------------- final (public functions)


def _bwd_case(M, N, K, which, variant, l2):
    """dA = dC @ B^T (which="da") or dB = A^T @ dC ("db") for C = A @ B, B = w.t() (F.linear)."""

    def build():
        def make():
            g = torch.Generator(device="cuda").manual_seed(M + N + K)
            a = torch.randn(M, K, generator=g, device="cuda").to(DT)
            w = torch.randn(N, K, generator=g, device="cuda").to(DT)
            dc = torch.randn(M, N, generator=g, device="cuda").to(DT)
            ref = dc.float() @ w.float() if which == "da" else a.float().t() @ dc.float()
            return a, w, dc, ref

        a, w, dc, ref = _cached(("b", M, N, K, which), make)
        if variant == "cublas":
            fn = (lambda: torch.mm(dc, w)) if which == "da" else (lambda: torch.mm(a.t(), dc))
        elif which == "da":
            fn = lambda: gm.gemm_grad_a(dc, w.t())  # noqa: E731
        else:
            fn = lambda: gm.gemm_grad_b(dc, a)  # noqa: E731
        return fn, lambda out: _rel(out, ref)

    return dict(group=f"gemm_{which}", shape=f"{M}x{N}x{K} NT", variant=variant,
                baseline=variant == "cublas", build=build,
                compile_key=f"{which}|{N % 16}|{K % 16}")  # fmt: skip


def final_cases(l2):
    """The public functions (default dispatch, autotuned) against the baselines, broad sweep."""
    g = []
    shapes = [(s, s, s, "NN") for s in (256, 512, 1024, 2048, 4096, 8192)]
    for T in (128, 512, 2048, 4096, 16384):
        shapes += [(T, 14336, 4096, "NT"), (T, 4096, 14336, "NT")]
    for T in (512, 4096):
        shapes += [(T, 4096, 4096, "NT"), (T, 6144, 4096, "NT"), (T, 28672, 8192, "NT")]
    shapes += [
        (4096, 4104, 4096, "NN"), (4104, 4096, 4096, "NN"), (4096, 4096, 4104, "NN"),
        (4095, 4096, 4096, "NN"), (4096, 4095, 4096, "NN"), (4096, 4096, 4095, "NN"),
        (4095, 4095, 4095, "NN"), (2047, 2047, 2047, "NN"), (3000, 3000, 3000, "NN"),
        (2048, 2056, 2048, "NN"), (4096, 4104, 4096, "NT"), (4095, 4095, 4095, "NT"),
        (4096, 4096, 4096, "TN"), (4096, 4096, 4096, "TT"), (4096, 4096, 4096, "sliced"),
        (1000, 768, 520, "NN"), (16384, 1024, 1024, "NN"),
    ]  # fmt: skip
    for M in (1, 2, 4, 8, 16, 32, 48, 64):
        shapes.append((M, 4096, 4096, "NT"))
    for M in (1, 16, 64):
        shapes += [(M, 14336, 4096, "NT"), (M, 4096, 14336, "NT"), (M, 28672, 8192, "NT"),
                   (M, 4104, 4095, "NT")]  # fmt: skip
    for M, N, K, lay in shapes:
        g += [gemm_case(M, N, K, lay, v, l2) for v in ("cublas", "auto")]
    for M, N, K in ((4096, 4096, 4096), (4096, 14336, 4096), (4096, 4104, 4096), (16384, 4096, 4096),
                    (2048, 4096, 14336), (64, 4096, 4096), (1, 4096, 4096), (4095, 4095, 4095)):  # fmt: skip
        for which in ("da", "db"):
            g += [_bwd_case(M, N, K, which, v, l2) for v in ("cublas", "auto")]
    i4 = []
    for N, K in ((28672, 8192), (8192, 8192), (128256, 4096), (14336, 4096), (4096, 14336),
                 (4096, 4096)):  # fmt: skip
        for M in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            i4 += [int4_case(M, N, K, v, l2) for v in ("tinygemm", "dense", "wg")]
    return i4 + g


def explore2_cases(l2):
    """Round 2: the PTX-decode INT4 plans, the fixed skinny kernel, the new default dispatch."""
    i4 = []
    shapes = [(28672, 8192), (128256, 4096), (8192, 8192), (14336, 4096), (4096, 14336),
              (4096, 4096)]  # fmt: skip
    for M in (1, 4, 16):
        for N, K in shapes:
            v = ["tinygemm", "dense", "wg"]
            dots = [(64, 3, 1), (128, 3, 1), (64, 3, 5), (128, 3, 5), (256, 3, 5)]
            if M == 1:
                v += [f"p:1,64,1,{s},2,1,0" for s in (1, 2, 4)]
                dots += [(64, 3, 3), (128, 3, 7), (64, 3, 7), (256, 3, 7), (128, 4, 7)]
            for bn, st, asm in dots:
                for split in (1, 2, 4):
                    v.append(f"p:16,{bn},1,{split},4,{st},{asm}")
            i4 += [int4_case(M, N, K, x, l2) for x in v]
    for M in (64, 256):
        for N, K in ((28672, 8192), (4096, 14336)):
            v = ["tinygemm", "dense", "wg"]
            for bm, bn, w in ((64, 128, 8), (128, 128, 8), (64, 64, 4), (128, 256, 8)):
                if bm > max(64, M):
                    continue
                for asm in (0, 1, 5):
                    v.append(f"p:{bm},{bn},1,1,{w},3,{asm}")
            i4 += [int4_case(M, N, K, x, l2) for x in v]
    sk = []
    for M in (1, 16, 64):
        for N, K in ((4096, 4096), (14336, 4096), (4096, 14336), (1024, 8192)):
            v = ["cublas", "auto"]
            for bn, bk, st in ((64, 128, 4), (128, 128, 3), (128, 64, 4)):
                for split in (1, 2, 4, 8):
                    v.append(f"skinny:16,{bn},{bk},{split},{st},4")
            sk += [gemm_case(M, N, K, "NT", x, l2) for x in v]
    big = []
    for M, N, K, lay in [
        (4096, 4096, 4096, "NN"), (4096, 4104, 4096, "NN"), (4095, 4095, 4095, "NN"),
        (4096, 4096, 4095, "NN"), (2048, 2056, 2048, "NN"), (4096, 4104, 4096, "NT"),
        (4096, 14336, 4096, "NT"), (1024, 1024, 1024, "NN"), (8192, 8192, 8192, "NN"),
        (4096, 4096, 4096, "sliced"), (2047, 2047, 2047, "NT"), (512, 512, 512, "NN"),
        (16384, 4096, 4096, "NT"), (128, 4096, 4096, "NT"),
    ]:  # fmt: skip
        v = ["cublas", "auto", "tma:256,128,64,3,8,1,0", "tma:128,256,64,4,8,1,0"]
        if lay == "sliced" or N % 16:
            v.append("padtma:128,256,64,3,8,1,0,force")
        big += [gemm_case(M, N, K, lay, x, l2) for x in v]
    first = [c for c in i4 if c["group"] == "int4_m1"]
    return first + sk + big + [c for c in i4 if c["group"] != "int4_m1"]
