"""What ``warpgauge profile`` launches: every warpgauge kernel family and the strongest peer at two
shapes each, with the read/write split of each target's analytical byte model.

A target's ``model`` is the *compulsory* traffic: each input read once, each output written once,
the same count as the kernel module's ``work()`` (``model_matches_work`` checks the sum). Scratch
traffic (split-plan statistics, split-K partials) is not in the model: it is what a measured
DRAM count above the model can reveal. Targets are ordered by priority: a time-boxed run profiles
the first ones.

Peers: the strongest provider the seed tables found that is importable on the GPU machine without
a network (Liger-Kernel when its wheel is installed, else PyTorch's own kernel: ``torch.softmax``,
``F.rms_norm`` after the add, ``torch.sum``, cuBLAS ``torch.mm``, tinygemm
``torch._weight_int4pack_mm``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ROW_SHAPES = {  # plan -> two (rows, width) shapes that select it on a 132-SM H200 (RowPlan rule)
    "resident": ((1024, 4096), (8192, 4096)),
    "looped": ((256, 65536), (512, 65536)),
    "split": ((4, 131072), (64, 131072)),
}
GEMM_SHAPES = ((2048, 2048, 2048), (4096, 4096, 4096))
INT4_SHAPES = {  # path -> (M, N, K); group 128. On 132 SMs the plan splits K below ~396 tiles
    "gemv": ((1, 28672, 8192), (1, 28672, 4096)),  # 896 tiles of 32 rows: no split
    "splitk": ((1, 4096, 4096), (1, 4096, 14336)),  # 128 tiles: split 4 and 4
    "gemv_dot": ((16, 28672, 4096),),  # tensor-core GEMV, one 16-row tile
}
ADD_SHAPES = (1 << 20, 1 << 24)


@dataclass(frozen=True)
class Model:
    """Analytical bytes of one call: ``read`` and ``write`` (compulsory)."""

    read: int
    write: int

    @property
    def total(self) -> int:
        return self.read + self.write


@dataclass(frozen=True)
class Target:
    name: str  # unique, e.g. "softmax.resident.1024x4096"
    op: str
    family: str  # "warpgauge" or the peer's name
    kernel_family: str  # e.g. "softmax/resident", "gemm", "int4/splitk", "softmax_bwd/looped"
    dtype: str
    shape: dict
    model: Model
    build: Callable[[Any], Callable[[], Any]] = field(compare=False, repr=False)
    note: str = ""
    rank: int = 0  # 0 for a family's first shape, 1 for its second: a time-boxed run does 0s first


def _e(dtype: str) -> int:
    return {"bfloat16": 2, "float16": 2, "float32": 4}[dtype]


def _dt(name: str):
    import torch

    return getattr(torch, name)


def _randn(shape, dtype, device, seed):
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)


def liger_available() -> bool:
    return importlib.util.find_spec("liger_kernel") is not None


def _with_plan(fn, plan: dict):
    """Attach the launch plan the kernel will use on this device (recorded by the runner)."""
    fn.plan = plan
    return fn


def _row_plan(rows, width, device) -> dict:
    from warpgauge._device import device_info
    from warpgauge.kernels.plans import RowPlan

    p = RowPlan.for_shape(rows, width, device_info(device).sm_count)
    return {"kind": p.kind, "block": p.block, "num_warps": p.num_warps, "split": p.split}


def _int4_plan(M, N, K, device) -> dict:
    from dataclasses import asdict

    from warpgauge._device import device_info
    from warpgauge.kernels.int4 import Int4Plan

    p = Int4Plan.for_shape(M, N, K, device_info(device).sm_count)
    return {**asdict(p), "path": p.path}


# ------------------------------------------------------------------------------- row operators


def _softmax(rows, width, dtype, plan, peer=None, bwd=False):
    e = _e(dtype)
    model = Model(read=(2 if bwd else 1) * rows * width * e, write=rows * width * e)

    def build(device):
        from warpgauge.kernels import softmax as k

        x = _randn((rows, width), _dt(dtype), device, 1)
        if bwd:
            y = k.softmax(x)
            dy = _randn((rows, width), _dt(dtype), device, 2)
            return _with_plan(lambda: k.softmax_backward(y, dy), _row_plan(rows, width, device))
        if peer == "liger":
            from liger_kernel.ops.softmax import LigerSoftmaxFunction

            return lambda: LigerSoftmaxFunction.apply(x)
        if peer == "torch":
            import torch

            return lambda: torch.softmax(x, -1)
        return _with_plan(lambda: k.softmax(x), _row_plan(rows, width, device))

    return model, build


def _rms(rows, width, dtype, plan, peer=None, bwd=False):
    e = _e(dtype)
    if bwd:  # read dy, dh, h, w; write dx, dw (the weight gradient's finish writes width values)
        model = Model(read=(3 * rows * width + width) * e, write=(rows * width + width) * e)
    else:  # read x, r, w; write y, h
        model = Model(read=(2 * rows * width + width) * e, write=2 * rows * width * e)

    def build(device):
        from warpgauge.kernels import rmsnorm as k

        x = _randn((rows, width), _dt(dtype), device, 1)
        r = _randn((rows, width), _dt(dtype), device, 2)
        w = _randn((width,), _dt(dtype), device, 3)
        if bwd:
            y, h = k.add_rms_norm(x, r, w, 1e-6)
            dy = _randn((rows, width), _dt(dtype), device, 4)
            dh = _randn((rows, width), _dt(dtype), device, 5)
            return _with_plan(
                lambda: k.add_rms_norm_backward(dy, dh, h, w, 1e-6), _row_plan(rows, width, device)
            )
        if peer == "liger":
            from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

            return lambda: LigerFusedAddRMSNormFunction.apply(x, r, w, 1e-6)
        if peer == "torch":
            import torch

            def call():
                h = x + r
                return torch.nn.functional.rms_norm(h, (width,), w, 1e-6), h

            return call
        return _with_plan(lambda: k.add_rms_norm(x, r, w, 1e-6), _row_plan(rows, width, device))

    return model, build


def _row_sum(rows, width, dtype, plan, peer=None, bwd=False):
    e = _e(dtype)
    model = Model(read=rows * width * e, write=rows * e)

    def build(device):
        from warpgauge.kernels import row_sum as k

        x = _randn((rows, width), _dt(dtype), device, 1)
        if peer == "torch":
            return lambda: x.sum(-1)
        return _with_plan(lambda: k.row_sum(x), _row_plan(rows, width, device))

    return model, build


def _add(n, dtype, peer=None):
    e = _e(dtype)

    def build(device):
        from warpgauge.kernels import add as k

        x = _randn((n,), _dt(dtype), device, 1)
        y = _randn((n,), _dt(dtype), device, 2)
        if peer == "torch":
            return lambda: x + y
        return lambda: k.add(x, y)

    return Model(read=2 * n * e, write=n * e), build


# ------------------------------------------------------------------------------- GEMM and INT4


def _gemm(M, N, K, dtype, peer=None, grad=None):
    e = _e(dtype)
    if grad == "a":  # dA[M, K] = dC[M, N] @ B^T
        model = Model(read=(M * N + K * N) * e, write=M * K * e)
    elif grad == "b":  # dB[K, N] = A^T @ dC
        model = Model(read=(M * K + M * N) * e, write=K * N * e)
    else:
        model = Model(read=(M * K + K * N) * e, write=M * N * e)

    def build(device):
        from warpgauge.kernels import gemm as k

        a = _randn((M, K), _dt(dtype), device, 1)
        b = _randn((K, N), _dt(dtype), device, 2)
        dc = _randn((M, N), _dt(dtype), device, 3)
        if grad == "a":
            return lambda: k.gemm_grad_a(dc, b)
        if grad == "b":
            return lambda: k.gemm_grad_b(dc, a)
        if peer == "cublas":
            import torch

            return lambda: torch.mm(a, b)
        return lambda: k.gemm(a, b)

    return model, build


def _int4(M, N, K, dtype, peer=None, grad=False, group=128):
    e = _e(dtype)
    weight = N * K // 2 + N * (K // group) * e
    if grad:  # dx[M, K] = g[M, N] @ W
        model = Model(read=weight + M * N * e, write=M * K * e)
    else:
        model = Model(read=weight + M * K * e, write=M * N * e)

    def build(device):
        from warpgauge.kernels import int4 as k
        from warpgauge.quant import quantize_int4

        w = _randn((N, K), _dt(dtype), device, 1)
        qw = quantize_int4(w, group)
        del w
        if grad:
            g = _randn((M, N), _dt(dtype), device, 2)
            return lambda: k.int4_linear_grad_input(g, qw)
        x = _randn((M, K), _dt(dtype), device, 3)
        if peer == "tinygemm":
            import torch

            from warpgauge.bench.providers import tinygemm_layout

            packed, gs, sz = tinygemm_layout(qw)
            return lambda: torch.ops.aten._weight_int4pack_mm(x, packed, gs, sz)
        return _with_plan(lambda: k.int4_linear(x, qw), _int4_plan(M, N, K, device))

    return model, build


# ------------------------------------------------------------------------------- the registry


def _label(shape: tuple) -> str:
    return "x".join(str(s) for s in shape)


def all_targets(dtype: str = "bfloat16", peers: bool = True) -> list[Target]:
    """Every target, in priority order: warpgauge forward families first, then peers, then the
    backward kernels."""
    liger = liger_available()
    out: list[Target] = []

    def add(name, op, family, kf, shape, made, note=""):
        model, build = made
        rank = sum(t.kernel_family == kf for t in out)
        out.append(Target(name, op, family, kf, dtype, shape, model, build, note, rank))

    for plan, shapes in ROW_SHAPES.items():
        for rows, width in shapes:
            lab = _label((rows, width))
            sh = {"rows": rows, "width": width}
            add(f"softmax.{plan}.{lab}", "softmax", "warpgauge", f"softmax/{plan}", sh,
                _softmax(rows, width, dtype, plan))  # fmt: skip
            add(f"add_rms_norm.{plan}.{lab}", "add_rms_norm", "warpgauge",
                f"add_rms_norm/{plan}", sh, _rms(rows, width, dtype, plan))  # fmt: skip
            add(f"row_sum.{plan}.{lab}", "row_sum", "warpgauge", f"row_sum/{plan}", sh,
                _row_sum(rows, width, dtype, plan))  # fmt: skip
    for M, N, K in GEMM_SHAPES:
        add(f"gemm.{_label((M, N, K))}", "gemm", "warpgauge", "gemm", {"M": M, "N": N, "K": K},
            _gemm(M, N, K, dtype))  # fmt: skip
    for path, shapes in INT4_SHAPES.items():
        for M, N, K in shapes:
            add(f"int4_linear.{path}.{_label((M, N, K))}", "int4_linear", "warpgauge",
                f"int4_linear/{path}", {"M": M, "N": N, "K": K, "group_size": 128},
                _int4(M, N, K, dtype))  # fmt: skip
    for n in ADD_SHAPES:
        add(f"add.{n}", "add", "warpgauge", "add", {"numel": n}, _add(n, dtype))
    if peers:
        peer = "liger" if liger else "torch"
        for rows, width in (ROW_SHAPES["resident"][1], ROW_SHAPES["split"][1]):
            lab = _label((rows, width))
            sh = {"rows": rows, "width": width}
            add(f"softmax.{peer}.{lab}", "softmax", peer, f"softmax/{peer}", sh,
                _softmax(rows, width, dtype, None, peer=peer))  # fmt: skip
            add(f"add_rms_norm.{peer}.{lab}", "add_rms_norm", peer, f"add_rms_norm/{peer}", sh,
                _rms(rows, width, dtype, None, peer=peer))  # fmt: skip
            add(f"row_sum.torch.{lab}", "row_sum", "torch", "row_sum/torch", sh,
                _row_sum(rows, width, dtype, None, peer="torch"))  # fmt: skip
        for M, N, K in GEMM_SHAPES:
            add(f"gemm.cublas.{_label((M, N, K))}", "gemm", "cublas", "gemm/cublas",
                {"M": M, "N": N, "K": K}, _gemm(M, N, K, dtype, peer="cublas"))  # fmt: skip
        for M, N, K in INT4_SHAPES["gemv"]:
            add(f"int4_linear.tinygemm.{_label((M, N, K))}", "int4_linear", "tinygemm",
                "int4_linear/tinygemm", {"M": M, "N": N, "K": K, "group_size": 128},
                _int4(M, N, K, dtype, peer="tinygemm"))  # fmt: skip
        for n in ADD_SHAPES:
            add(f"add.torch.{n}", "add", "torch", "add/torch", {"numel": n},
                _add(n, dtype, peer="torch"))  # fmt: skip
    for plan, shapes in ROW_SHAPES.items():
        for rows, width in shapes:
            lab = _label((rows, width))
            sh = {"rows": rows, "width": width}
            add(f"softmax_bwd.{plan}.{lab}", "softmax_bwd", "warpgauge", f"softmax_bwd/{plan}",
                sh, _softmax(rows, width, dtype, plan, bwd=True))  # fmt: skip
            add(f"add_rms_norm_bwd.{plan}.{lab}", "add_rms_norm_bwd", "warpgauge",
                f"add_rms_norm_bwd/{plan}", sh, _rms(rows, width, dtype, plan, bwd=True))  # fmt: skip
    for M, N, K in GEMM_SHAPES:
        for g in ("a", "b"):
            add(f"gemm_grad_{g}.{_label((M, N, K))}", f"gemm_grad_{g}", "warpgauge",
                f"gemm_grad_{g}", {"M": M, "N": N, "K": K}, _gemm(M, N, K, dtype, grad=g))  # fmt: skip
    for M, N, K in ((16, 4096, 4096), (256, 4096, 4096)):
        add(f"int4_linear_grad.{_label((M, N, K))}", "int4_linear_grad", "warpgauge",
            "int4_linear_grad", {"M": M, "N": N, "K": K, "group_size": 128},
            _int4(M, N, K, dtype, grad=True))  # fmt: skip
    return sorted(out, key=lambda t: t.rank)  # stable: family order kept within a rank


def select(targets: list[Target], patterns: list[str] | None) -> list[Target]:
    """Targets whose name contains any of ``patterns`` (all when None); unknown patterns raise."""
    if not patterns:
        return list(targets)
    chosen = [t for t in targets if any(p in t.name for p in patterns)]
    unmatched = [p for p in patterns if not any(p in t.name for t in targets)]
    if unmatched:
        raise ValueError(
            f"--targets {', '.join(unmatched)}: no target name contains it; "
            "`warpgauge profile --list` prints every target"
        )
    return chosen


def model_matches_work(t: Target) -> bool:
    """The target's read + write equals its kernel module's ``work()`` bytes (forward ops)."""
    import torch

    dt = getattr(torch, t.dtype)
    s = t.shape
    if t.op == "softmax":
        from warpgauge.kernels.softmax import work
    elif t.op == "add_rms_norm":
        from warpgauge.kernels.rmsnorm import work
    elif t.op == "row_sum":
        from warpgauge.kernels.row_sum import work
    elif t.op == "gemm":
        from warpgauge.kernels.gemm import work

        return work(s["M"], s["N"], s["K"], dt).bytes == t.model.total
    elif t.op == "int4_linear":
        from warpgauge.kernels.int4 import work

        return work(s["M"], s["N"], s["K"], s["group_size"], dt).bytes == t.model.total
    elif t.op == "add":
        from warpgauge.kernels.add import work

        return work(s["numel"], dt).bytes == t.model.total
    else:
        raise ValueError(f"{t.name}: no work() model for op {t.op!r} (backward targets)")
    return work(s["rows"], s["width"], dt).bytes == t.model.total
