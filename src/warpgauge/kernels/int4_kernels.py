"""The INT4 linear kernels (Triton device code); plans and launchers are in ``int4.py``, whose
docstring describes the paths. Nothing here reads module flags: the launcher passes them as
constexprs (``int4._decode_flags``)."""

from __future__ import annotations

import triton
import triton.language as tl

# FMA GEMV nibble decoding. The weight is read as int32 words (8 nibbles, k = 8*word + i). After
# w ^= 0x88888888 every nibble holds u = q + 8. For a nibble at bit position 4p (p <= 4), the
# float with bits (w & (0xF << 4p)) | 0x4B000000 is exactly 2**23 + u * 16**p, so subtracting
# C_p = 2**23 + 8 * 16**p leaves q * 16**p: one LOP3 (the magic is a register operand) and one FADD
# per value, no shifts, no byte extraction, no int->float conversion. x is pre-scaled by 16**-p, so
# the FFMA accumulates exactly q * x. Nibbles 5..7 are reached by one shift of the word by 12.
_MAGIC_F32 = 0x4B000000
_XOR8 = tl.constexpr(-0x77777778)  # 0x88888888 as an int32


@triton.jit
def _nib(w, MASK: tl.constexpr, magic, C: tl.constexpr):
    return ((w & MASK) | magic).to(tl.float32, bitcast=True) - C


@triton.jit
def _fma_load(w_ptrs, x_ptrs, s_ptrs, g0, g_limit,
              GROUP: tl.constexpr, WPAD: tl.constexpr, GPI: tl.constexpr):  # fmt: skip
    """One K step of the FMA GEMV (groups g0 .. g0 + GPI - 1): weight words [BN, GPI, WPAD],
    x [GPI, WPAD, 8], scales [BN, GPI]. Groups at or past ``g_limit`` (the end of this program's
    range) load nothing and read as zeros."""
    WORDS: tl.constexpr = GROUP // 8
    gmask = (g0 + tl.arange(0, GPI)) < g_limit
    if WPAD == WORDS:
        wmask = gmask[None, :, None]
        xmask = gmask[:, None, None]
    else:  # group_size / 8 not a power of two: pad the group's words
        wi = tl.arange(0, WPAD)
        wmask = gmask[None, :, None] & (wi < WORDS)[None, None, :]
        xmask = gmask[:, None, None] & (wi < WORDS)[None, :, None]
    b = tl.load(w_ptrs, mask=wmask, other=0)
    xv = tl.load(x_ptrs, mask=xmask, other=0.0)
    sc = tl.load(s_ptrs, mask=gmask[None, :], other=0.0)
    return b, xv, sc


@triton.jit
def _fma_step(b, xv, sc, xscale, magic, GPI: tl.constexpr, WPAD: tl.constexpr):
    """One K step of the FMA GEMV: sum over GPI groups of scale * sum(q * x), per row."""
    x8 = xv.to(tl.float32) * xscale[None, None, :]
    xa, xb = tl.split(tl.reshape(x8, (GPI, WPAD, 4, 2)))  # i even / odd
    xa0, xa1 = tl.split(tl.reshape(xa, (GPI, WPAD, 2, 2)))  # i in {0, 4} / {2, 6}
    xb0, xb1 = tl.split(tl.reshape(xb, (GPI, WPAD, 2, 2)))  # i in {1, 5} / {3, 7}
    x0, x4 = tl.split(xa0)
    x2, x6 = tl.split(xa1)
    x1, x5 = tl.split(xb0)
    x3, x7 = tl.split(xb1)
    w = b ^ _XOR8
    wh = w >> 12
    t = _nib(w, 0xF, magic, 8388616.0) * x0[None, :, :]
    t += _nib(w, 0xF0, magic, 8388736.0) * x1[None, :, :]
    t += _nib(w, 0xF00, magic, 8390656.0) * x2[None, :, :]
    t += _nib(w, 0xF000, magic, 8421376.0) * x3[None, :, :]
    t += _nib(w, 0xF0000, magic, 8912896.0) * x4[None, :, :]
    t += _nib(wh, 0xF00, magic, 8390656.0) * x5[None, :, :]
    t += _nib(wh, 0xF000, magic, 8421376.0) * x6[None, :, :]
    t += _nib(wh, 0xF0000, magic, 8912896.0) * x7[None, :, :]
    p = tl.sum(t, axis=2)  # [BN, GPI]: one group's sum of q * x per row
    return tl.sum(p * sc.to(tl.float32), axis=1)


@triton.jit
def _gemv_fma(x_ptr, w_ptr, s_ptr, row, offs_n, it_start, it_end, n_groups, magic,
              stride_xm, stride_xk, stride_wn, stride_sn,
              GROUP: tl.constexpr, WPAD: tl.constexpr, BLOCK_N: tl.constexpr,
              GPI: tl.constexpr):  # fmt: skip
    # Per step: read BLOCK_N x GPI x GROUP/2 weight bytes (the DRAM stream) + BLOCK_N x GPI scales
    # + GPI*GROUP x values (L1/L2). Per weight value: LOP3 + FADD + FFMA, plus 1/8 of (xor, shift,
    # word sum) and x's conversion shared by the 4 rows a thread holds: ~4.5 SASS instructions.
    WORDS: tl.constexpr = GROUP // 8
    gi = tl.arange(0, GPI)
    wi = tl.arange(0, WPAD)
    ei = tl.arange(0, 8)
    rows = offs_n.to(tl.int64)
    g_start = it_start * GPI
    w_ptrs = (
        w_ptr
        + rows[:, None, None] * stride_wn
        + g_start * WORDS
        + (gi[None, :, None] * WORDS + wi[None, None, :])
    )
    s_ptrs = s_ptr + rows[:, None] * stride_sn + g_start + gi[None, :]
    koff = g_start * GROUP + gi[:, None, None] * GROUP + wi[None, :, None] * 8 + ei[None, None, :]
    x_ptrs = x_ptr + row.to(tl.int64) * stride_xm + koff.to(tl.int64) * stride_xk
    # x[k = 8w + i] is multiplied by 16**-p(i), p = (0, 1, 2, 3, 4, 2, 3, 4)[i] (exact scaling).
    pos = ei - 3 * (ei >= 5).to(tl.int32)
    xscale = ((127 - 4 * pos) << 23).to(tl.float32, bitcast=True)  # 2**(-4p), built exactly
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    g_limit = tl.minimum(it_end * GPI, n_groups)
    # Register double-buffering: the next step's loads are issued before this step's math.
    # (A plain loop is not software-pipelined by Triton here: no cp.async in its SASS.)
    b, xv, sc = _fma_load(w_ptrs, x_ptrs, s_ptrs, g_start, g_limit, GROUP, WPAD, GPI)
    for it in range(it_start, it_end):
        w_ptrs += GPI * WORDS
        x_ptrs += GPI * GROUP * stride_xk
        s_ptrs += GPI
        b_nx, x_nx, s_nx = _fma_load(
            w_ptrs, x_ptrs, s_ptrs, (it + 1) * GPI, g_limit, GROUP, WPAD, GPI
        )
        acc += _fma_step(b, xv, sc, xscale, magic, GPI, WPAD)
        b, xv, sc = b_nx, x_nx, s_nx
    return acc


# PTX decode of 4 packed bytes (one 32-bit register, pack=4) into 8 values, two per 32-bit
# register: PRMT spreads bytes (b0, b1) and (b2, b3) into the two halves of a register, LOP3
# computes ((b & 0xF) ^ 0x8) | magic per half in one instruction (magic 0x4300: BF16 128 + u,
# 0x6400: FP16 1024 + u, u = q + 8), and one packed FMA subtracts (136 | 1032): 12 instructions per
# 8 values, against ~4 per value for the same steps in Triton's 16-bit integer ops. Elementwise per
# byte: output lo[j] / hi[j] is the low / high nibble of input byte j.
_DECODE_ASM = """{
.reg .b32 z, m, one, neg, t0, t1, s0, s1;
mov.b32 z, 0;
mov.b32 m, MAGIC;
mov.b32 one, ONE;
mov.b32 neg, NEG;
prmt.b32 t0, $4, z, 0x4140;
prmt.b32 t1, $4, z, 0x4342;
shr.u32 s0, t0, 4;
shr.u32 s1, t1, 4;
lop3.b32 t0, t0, 0x000F000F, m, 0x6A;
lop3.b32 t1, t1, 0x000F000F, m, 0x6A;
lop3.b32 s0, s0, 0x000F000F, m, 0x6A;
lop3.b32 s1, s1, 0x000F000F, m, 0x6A;
fma.rn.TY $0, t0, one, neg;
fma.rn.TY $1, t1, one, neg;
fma.rn.TY $2, s0, one, neg;
fma.rn.TY $3, s1, one, neg;
}"""
# One line: Inductor copies constexpr strings into the source it generates for a traced kernel,
# where a newline inside the string literal is a syntax error (torch.compile of int4_linear).
_DECODE_ASM = " ".join(_DECODE_ASM.split())
_DECODE_BF16 = tl.constexpr(
    _DECODE_ASM.replace("MAGIC", "0x43084308").replace("ONE", "0x3F803F80")
    .replace("NEG", "0xC308C308").replace("TY", "bf16x2")
)  # fmt: skip
_DECODE_F16 = tl.constexpr(
    _DECODE_ASM.replace("MAGIC", "0x64086408").replace("ONE", "0x3C003C00")
    .replace("NEG", "0xE408E408").replace("TY", "f16x2")
)  # fmt: skip
# FOLD: the same without the packed subtract: the values are q + OFFSET (136 in BF16, 1032 in FP16),
# still exact integers; the dot's result is corrected by OFFSET * sum(x) per group (one FP32 FMA
# per output instead of one packed FMA per two weight values).
_DECODE_FOLD = (
    (_DECODE_ASM.split(" fma.rn.TY")[0] + " mov.b32 $0, t0; mov.b32 $1, t1; mov.b32 $2, s0;"
     " mov.b32 $3, s1; }")
    .replace(" mov.b32 one, ONE;", "").replace(" mov.b32 neg, NEG;", "")
    .replace(".reg .b32 z, m, one, neg,", ".reg .b32 z, m,")
)  # fmt: skip
_DECODE_FOLD_BF16 = tl.constexpr(_DECODE_FOLD.replace("MAGIC", "0x43084308"))
_DECODE_FOLD_F16 = tl.constexpr(_DECODE_FOLD.replace("MAGIC", "0x64086408"))


@triton.jit
def _dequant16(b, R: tl.constexpr, H: tl.constexpr, X_BF16: tl.constexpr, UPCAST: tl.constexpr,
               ASM: tl.constexpr = False, FOLD: tl.constexpr = False):  # fmt: skip
    """uint8 bytes [R, H] -> the exact integers q as an [R, 2H] tile in k order (byte j holds
    k = 2j and 2j + 1), 16-bit in x's dtype (FP32 under the interpreter, whose BF16 dot is wrong).
    FOLD: the values are q + _fold_offset(X_BF16) (exact integers too)."""
    lo, hi = _dequant_halves(b, X_BF16, UPCAST, ASM, FOLD)
    return tl.reshape(tl.join(lo, hi), (R, 2 * H))


@triton.jit
def _dequant_halves(b, X_BF16: tl.constexpr, UPCAST: tl.constexpr, ASM: tl.constexpr,
                    FOLD: tl.constexpr):  # fmt: skip
    """uint8 bytes [R, H] -> (lo, hi): the [R, H] tiles of the even-k and odd-k values."""
    if UPCAST:
        bi = b.to(tl.int32)
        lo = ((bi & 0xF) ^ 0x4B000008).to(tl.float32, bitcast=True) - 8388616.0
        hi = ((bi >> 4) ^ 0x4B000008).to(tl.float32, bitcast=True) - 8388616.0
        if FOLD:
            lo += _fold_offset(X_BF16)
            hi += _fold_offset(X_BF16)
    elif ASM and FOLD:
        if X_BF16:
            lo, hi = tl.inline_asm_elementwise(
                _DECODE_FOLD_BF16, "=r,=r,=r,=r,r", [b], dtype=(tl.bfloat16, tl.bfloat16),
                is_pure=True, pack=4,
            )  # fmt: skip
        else:
            lo, hi = tl.inline_asm_elementwise(
                _DECODE_FOLD_F16, "=r,=r,=r,=r,r", [b], dtype=(tl.float16, tl.float16),
                is_pure=True, pack=4,
            )  # fmt: skip
    elif ASM:
        if X_BF16:
            lo, hi = tl.inline_asm_elementwise(
                _DECODE_BF16, "=r,=r,=r,=r,r", [b], dtype=(tl.bfloat16, tl.bfloat16),
                is_pure=True, pack=4,
            )  # fmt: skip
        else:
            lo, hi = tl.inline_asm_elementwise(
                _DECODE_F16, "=r,=r,=r,=r,r", [b], dtype=(tl.float16, tl.float16),
                is_pure=True, pack=4,
            )  # fmt: skip
    else:
        bi = b.to(tl.int16)
        if X_BF16:  # bits 0x4300 + u = 128 + u in BF16
            lo = ((bi & 0xF) ^ 0x4308).to(tl.bfloat16, bitcast=True) - 136.0
            hi = ((bi >> 4) ^ 0x4308).to(tl.bfloat16, bitcast=True) - 136.0
        else:  # bits 0x6400 + u = 1024 + u in FP16
            lo = ((bi & 0xF) ^ 0x6408).to(tl.float16, bitcast=True) - 1032.0
            hi = ((bi >> 4) ^ 0x6408).to(tl.float16, bitcast=True) - 1032.0
        if FOLD:
            lo += _fold_offset(X_BF16)
            hi += _fold_offset(X_BF16)
    return lo, hi


@triton.jit
def _fold_offset(X_BF16: tl.constexpr):
    # q + 136 = bits 0x4300 + u (BF16, u = q + 8); q + 1032 = bits 0x6400 + u (FP16)
    return 136.0 if X_BF16 else 1032.0


@triton.jit
def _tile_dot(x_ptr, w_ptr, s_ptr, offs_m, offs_n, g_start, g_end,
              stride_xm, stride_xk, stride_wn, stride_sn,
              GROUP: tl.constexpr, HALF_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, X_BF16: tl.constexpr, UPCAST: tl.constexpr,
              ASM: tl.constexpr, ONE_ROW: tl.constexpr, W_AS_B: tl.constexpr = False,
              HALVES: tl.constexpr = False, FOLD: tl.constexpr = False,
              ROUND: tl.constexpr = False):  # fmt: skip
    # Per group: read BLOCK_N x GROUP/2 weight bytes + BLOCK_N scales (DRAM stream) and the
    # GROUP x BLOCK_M slice of x (L2); one [BLOCK_N, GROUP] x [GROUP, BLOCK_M] tensor-core product.
    # HALVES: two [BLOCK_N, GROUP/2] products instead, the low nibbles (even k) against x[even k]
    # and the high nibbles against x[odd k]: the decoded halves feed the dots as they are (no
    # interleave of 16-bit values between registers). FOLD: the decode skips its subtract and
    # each group's product is corrected by _fold_offset * sum(x) (see _DECODE_FOLD).
    # ROUND: the weight is rounded once to x's dtype as q * scale (what dense F.linear on the
    # dequantized weight multiplies), so one accumulator runs across groups (no per-group product
    # and rescale); FOLD is ignored. The other forms multiply the exact integers q.
    HALF: tl.constexpr = GROUP // 2
    jj = tl.arange(0, HALF_PAD)
    cc = tl.arange(0, 2 * HALF_PAD)
    w_ptrs = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn + g_start * HALF + jj[None, :]
    x_ptrs = (
        x_ptr
        + (g_start * GROUP + cc).to(tl.int64)[:, None] * stride_xk
        + offs_m.to(tl.int64)[None, :] * stride_xm
    )
    # ONE_ROW (M == 1): x is one row, loaded once per group and broadcast to the dot's 16 columns
    x1_ptrs = x_ptr + (g_start * GROUP + cc).to(tl.int64) * stride_xk
    s_ptrs = s_ptr + offs_n.to(tl.int64) * stride_sn + g_start
    if W_AS_B:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for _ in range(g_start, g_end):
        if HALF_PAD == HALF:
            b = tl.load(w_ptrs)
        else:
            b = tl.load(w_ptrs, mask=(jj < HALF)[None, :], other=0)
        xt = _load_x(x_ptrs, x1_ptrs, cc < GROUP, HALF_PAD == HALF, ONE_ROW, BLOCK_M)
        if HALVES:  # x[even k], x[odd k]: one contiguous load, split in registers
            xe, xo = tl.split(tl.reshape(tl.trans(xt), (BLOCK_M, HALF_PAD, 2)))
            xt = tl.trans(xe)
            xo = tl.trans(xo)
        x1_ptrs += GROUP * stride_xk
        sc = tl.load(s_ptrs).to(tl.float32)
        w_ptrs += HALF
        x_ptrs += GROUP * stride_xk
        s_ptrs += 1
        if UPCAST:
            xt = xt.to(tl.float32)
            if HALVES:
                xo = xo.to(tl.float32)
        if ROUND and HALVES:
            lo, hi = _dequant_halves(b, X_BF16, UPCAST, ASM, False)
            lo = _scaled(lo, sc, X_BF16, UPCAST)
            hi = _scaled(hi, sc, X_BF16, UPCAST)
            if W_AS_B:
                acc = tl.dot(tl.trans(xt), tl.trans(lo), acc)
                acc = tl.dot(tl.trans(xo), tl.trans(hi), acc)
            else:
                acc = tl.dot(lo, xt, acc)
                acc = tl.dot(hi, xo, acc)
        elif ROUND:
            wq = _scaled(_dequant16(b, BLOCK_N, HALF_PAD, X_BF16, UPCAST, ASM), sc, X_BF16, UPCAST)
            if W_AS_B:
                acc = tl.dot(tl.trans(xt), tl.trans(wq), acc)
            else:
                acc = tl.dot(wq, xt, acc)
        elif HALVES:
            lo, hi = _dequant_halves(b, X_BF16, UPCAST, ASM, FOLD)
            if W_AS_B:
                part = tl.dot(tl.trans(xt), tl.trans(lo))
                part = tl.dot(tl.trans(xo), tl.trans(hi), part)
            else:
                part = tl.dot(lo, xt)
                part = tl.dot(hi, xo, part)
        else:
            wq = _dequant16(b, BLOCK_N, HALF_PAD, X_BF16, UPCAST, ASM, FOLD)
            if W_AS_B:  # x as the dot's A side (M x K), the decoded weight as B (K x N): acc is y
                part = tl.dot(tl.trans(xt), tl.trans(wq))
            else:  # exact integer weights: the scale is applied once per group
                part = tl.dot(wq, xt)
        if FOLD and not ROUND:
            xs = tl.sum(xt.to(tl.float32), axis=0)
            if HALVES:
                xs += tl.sum(xo.to(tl.float32), axis=0)
            if W_AS_B:
                part -= _fold_offset(X_BF16) * xs[:, None]
            else:
                part -= _fold_offset(X_BF16) * xs[None, :]
        if not ROUND:
            if W_AS_B:
                acc += part * sc[None, :]
            else:
                acc += part * sc[:, None]
    if W_AS_B:
        out = tl.trans(acc)
    else:
        out = acc
    return out


@triton.jit
def _scaled(w, sc, X_BF16: tl.constexpr, UPCAST: tl.constexpr):
    """Decoded integers [R, C] times the rows' scales [R] (exact in FP32), rounded once to x's
    dtype (kept in FP32 under the interpreter, whose BF16 dot is wrong)."""
    p = w.to(tl.float32) * sc[:, None]
    if UPCAST and X_BF16:  # the interpreter truncates FP32 -> BF16: round to nearest even here
        bits = p.to(tl.int32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
        r = bits.to(tl.float32, bitcast=True)
    else:
        r = p.to(tl.bfloat16 if X_BF16 else tl.float16)
        if UPCAST:
            r = r.to(tl.float32)
    return r


@triton.jit
def _load_x(x_ptrs, x1_ptrs, kmask, FULL: tl.constexpr, ONE_ROW: tl.constexpr,
            BLOCK_M: tl.constexpr):  # fmt: skip
    """One group's slice of x as a [k, BLOCK_M] tile (k lanes past the group read as zeros)."""
    if ONE_ROW:
        if FULL:
            xv = tl.load(x1_ptrs)
        else:
            xv = tl.load(x1_ptrs, mask=kmask, other=0.0)
        xt = tl.broadcast_to(xv[:, None], (xv.shape[0], BLOCK_M))
    elif FULL:
        xt = tl.load(x_ptrs)
    else:
        xt = tl.load(x_ptrs, mask=kmask[:, None], other=0.0)
    return xt


@triton.jit(do_not_specialize=["M", "magic"])
def _int4_mm_kernel(x_ptr, w_ptr, s_ptr, y_ptr, part_ptr, M, N, K, magic,
                    stride_xm, stride_xk, stride_wn, stride_sn, stride_ym, stride_yn,
                    GROUP: tl.constexpr, HALF_PAD: tl.constexpr, WPAD: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GPI: tl.constexpr,
                    SPLIT_K: tl.constexpr, X_BF16: tl.constexpr,
                    UPCAST: tl.constexpr, ASM: tl.constexpr = False,
                    ONE_ROW: tl.constexpr = False, W_AS_B: tl.constexpr = False,
                    HALVES: tl.constexpr = False, FOLD: tl.constexpr = False,
                    ROUND: tl.constexpr = False):  # fmt: skip
    # I/O (compulsory): read packed N*K/2 B + scales N*K/GROUP + x M*K, write y M*N; with
    # SPLIT_K > 1 also write + read SPLIT_K*M*N FP32 partials. FLOPs 2*M*N*K.
    # w_ptr: the packed weight as int32 words (BLOCK_M == 1) or bytes (tensor-core paths);
    # stride_wn counts those elements. magic = 0x4B000000, a runtime value so that it sits in a
    # register and each nibble decodes with one LOP3 (an immediate would split it in two).
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_pid_m  # M-tiles of one N-tile run together: its weight bytes stay in L2
    pid_n = pid // num_pid_m
    n_groups = K // GROUP
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows_n = offs_n % N  # wrapped: the last tile re-reads valid rows, only the store is masked
    if BLOCK_M == 1:
        n_iters = tl.cdiv(n_groups, GPI)
        per_split = tl.cdiv(n_iters, SPLIT_K)
        it_start = pid_k * per_split
        it_end = tl.minimum(it_start + per_split, n_iters)
        acc = _gemv_fma(x_ptr, w_ptr, s_ptr, pid_m, rows_n, it_start, it_end, n_groups, magic,
                        stride_xm, stride_xk, stride_wn, stride_sn,
                        GROUP, WPAD, BLOCK_N, GPI)  # fmt: skip
        n_mask = offs_n < N
        if SPLIT_K == 1:
            y_ptrs = y_ptr + pid_m.to(tl.int64) * stride_ym + offs_n.to(tl.int64) * stride_yn
            tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=n_mask)
        else:
            p_ptrs = part_ptr + (pid_k * M + pid_m).to(tl.int64) * N + offs_n
            tl.store(p_ptrs, acc, mask=n_mask)
    else:
        per_split = tl.cdiv(n_groups, SPLIT_K)
        g_start = pid_k * per_split
        g_end = tl.minimum(g_start + per_split, n_groups)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        acc = _tile_dot(x_ptr, w_ptr, s_ptr, offs_m % M, rows_n, g_start, g_end,
                        stride_xm, stride_xk, stride_wn, stride_sn,
                        GROUP, HALF_PAD, BLOCK_M, BLOCK_N, X_BF16, UPCAST, ASM,
                        ONE_ROW, W_AS_B, HALVES, FOLD, ROUND)  # fmt: skip
        mask = (offs_n[:, None] < N) & (offs_m[None, :] < M)
        if SPLIT_K == 1:
            y_ptrs = (
                y_ptr
                + offs_m.to(tl.int64)[None, :] * stride_ym
                + offs_n.to(tl.int64)[:, None] * stride_yn
            )
            tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)
        else:
            p_ptrs = (
                part_ptr
                + (pid_k * M + offs_m).to(tl.int64)[None, :] * N
                + offs_n.to(tl.int64)[:, None]
            )
            tl.store(p_ptrs, acc, mask=mask)


@triton.jit
def _splitk_reduce_kernel(part_ptr, y_ptr, total, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    # I/O: read SPLIT_K*M*N FP32 partials, write M*N outputs. Fixed order 0..SPLIT_K-1: deterministic.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    acc = tl.load(part_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT_K):
        acc += tl.load(part_ptr + s * total + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M"])
def _int4_grad_input_kernel(g_ptr, w_ptr, s_ptr, dx_ptr, part_ptr, M, N, K, N_CHUNK,
                            stride_gm, stride_gn, stride_wn, stride_sn, stride_dm, stride_dk,
                            GROUP: tl.constexpr, HALF_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr, PARTIAL: tl.constexpr, X_BF16: tl.constexpr,
                            UPCAST: tl.constexpr, FOLD: tl.constexpr,
                            DECODE: tl.constexpr = 0):  # fmt: skip
    # I/O (compulsory): read grad_out M*N + packed N*K/2 B + scales N*K/GROUP, write dx M*K.
    # Each program owns dx[BLOCK_M rows, one group of columns] and reduces over rows
    # [split * N_CHUNK, (split + 1) * N_CHUNK) of W (axis 1; N_CHUNK a multiple of BLOCK_N).
    # One split (not PARTIAL): the whole N, stored to dx. PARTIAL: FP32 partials part[split, M, K]
    # (contiguous), summed in split order by _splitk_reduce_kernel (deterministic). The split
    # count is the grid's axis 1, not a constexpr: a new batch size never compiles a new kernel.
    # FLOPs 2*M*N*K (issued twice on tensor cores: the hi and lo halves of the exact weight).
    HALF: tl.constexpr = GROUP // 2
    pid = tl.program_id(0)
    n_begin = tl.program_id(1) * N_CHUNK
    n_end = tl.minimum(N, n_begin + N_CHUNK)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_pid_m
    grp = pid // num_pid_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows_m = (offs_m % M).to(tl.int64)
    jj = tl.arange(0, HALF_PAD)
    cc = tl.arange(0, 2 * HALF_PAD)
    rn = tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, 2 * HALF_PAD), dtype=tl.float32)
    acc_e = tl.zeros((BLOCK_M, HALF_PAD), dtype=tl.float32)  # FOLD: even columns (low nibbles)
    acc_o = tl.zeros((BLOCK_M, HALF_PAD), dtype=tl.float32)  # FOLD: odd columns (high nibbles)
    for n0 in range(n_begin, n_end, BLOCK_N):
        offs_n = n0 + rn
        wrapped = (offs_n % N).to(tl.int64)  # valid rows for the weight; grad_out is zero past N
        g = tl.load(
            g_ptr + rows_m[:, None] * stride_gm + offs_n.to(tl.int64)[None, :] * stride_gn,
            mask=(offs_n < n_end)[None, :],
            other=0.0,
        )
        w_ptrs = w_ptr + wrapped[:, None] * stride_wn + grp * HALF + jj[None, :]
        if HALF_PAD == HALF:
            b = tl.load(w_ptrs)
        else:
            b = tl.load(w_ptrs, mask=(jj < HALF)[None, :], other=0)
        sc = tl.load(s_ptr + wrapped * stride_sn + grp).to(tl.float32)
        bi = b.to(tl.int32)
        if FOLD:
            # The group's scale depends on the weight row n only, the reduction index: fold it
            # into grad_out (g * s is exact in FP32: two 8-bit significands) and split that
            # into hi + lo BF16 halves (exact); the nibbles themselves are exact in BF16. Even
            # and odd columns accumulate apart (no interleave per step), joined once at the end.
            gs = g.to(tl.float32) * sc[None, :]
            g_hi = gs.to(g.dtype)
            g_lo = (gs - g_hi.to(tl.float32)).to(g.dtype)
            if DECODE == 0:  # int -> float conversions (I2F + F2F per nibble)
                q_e = (((bi & 0xF) ^ 8) - 8).to(tl.float32)
                q_o = ((((bi >> 4) & 0xF) ^ 8) - 8).to(tl.float32)
                if not UPCAST:
                    q_e = q_e.to(g.dtype)
                    q_o = q_o.to(g.dtype)
            else:  # 1: the BF16 bit trick in Triton ops; 2: the PTX decode (_dequant_halves)
                q_e, q_o = _dequant_halves(b, X_BF16, UPCAST, DECODE == 2, False)
            if UPCAST:
                g_hi = g_hi.to(tl.float32)
                g_lo = g_lo.to(tl.float32)
            acc_e = tl.dot(g_hi, q_e, acc_e)
            acc_e = tl.dot(g_lo, q_e, acc_e)
            acc_o = tl.dot(g_hi, q_o, acc_o)
            acc_o = tl.dot(g_lo, q_o, acc_o)
        else:
            lo = ((bi & 0xF) ^ 0x4B000008).to(tl.float32, bitcast=True) - 8388616.0
            hi = ((bi >> 4) ^ 0x4B000008).to(tl.float32, bitcast=True) - 8388616.0
            w = tl.reshape(tl.join(lo, hi), (BLOCK_N, 2 * HALF_PAD)) * sc[:, None]  # exact
            w_hi = w.to(g.dtype)
            w_lo = (w - w_hi.to(tl.float32)).to(g.dtype)  # w_hi + w_lo == w exactly
            if UPCAST:
                g32 = g.to(tl.float32)
                acc = tl.dot(g32, w_hi.to(tl.float32), acc)
                acc = tl.dot(g32, w_lo.to(tl.float32), acc)
            else:
                acc = tl.dot(g, w_hi, acc)
                acc = tl.dot(g, w_lo, acc)
    if FOLD:
        acc = tl.reshape(tl.join(acc_e, acc_o), (BLOCK_M, 2 * HALF_PAD))
    col = grp * GROUP + cc
    out_mask = (offs_m[:, None] < M) & (cc[None, :] < GROUP)
    if not PARTIAL:
        dx_ptrs = (
            dx_ptr
            + offs_m.to(tl.int64)[:, None] * stride_dm
            + col.to(tl.int64)[None, :] * stride_dk
        )
        tl.store(dx_ptrs, acc.to(dx_ptr.dtype.element_ty), mask=out_mask)
    else:
        p_ptrs = (
            part_ptr
            + tl.program_id(1).to(tl.int64) * M * K
            + offs_m.to(tl.int64)[:, None] * K
            + col.to(tl.int64)[None, :]
        )
        tl.store(p_ptrs, acc, mask=out_mask)
