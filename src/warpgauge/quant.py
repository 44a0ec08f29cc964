"""Symmetric signed INT4 weight-only quantization: packing, unpacking, the byte model.

The contract (design.md, "Numerical contracts"):

- A weight ``W`` of shape ``(N, K)`` (``N`` output features, ``K`` input features, as in
  ``F.linear``) is split along ``K`` into groups of ``group_size`` consecutive values (default 128).
- Per group, ``scale = absmax / 7`` and ``q = clamp(round(w / scale), -8, 7)``; ``W ~ q * scale``.
  ``q`` is computed against the *stored* (rounded) scale, so ``|w - q * scale| <= scale / 2`` for
  every element. Rounding is round-half-to-even (``torch.round``).
- A group whose absmax is 0 gets ``scale = 0`` and ``q = 0``; it dequantizes to exact zeros, never
  NaN or inf. Non-finite weights are rejected.
- Scales are stored in the weight's dtype: BF16 weights -> BF16 scales, FP16 -> FP16. An FP32
  weight gets BF16 scales (the INT4 kernels compute in the activations' dtype, and BF16 keeps
  FP32's exponent range, so no scale overflows).

Memory layout ("group-major" as the INT4 kernels read it)
----------------------------------------------------------
``packed``: ``uint8``, shape ``(N, K // 2)``, row-major and contiguous. Byte ``j`` of row ``n``
holds ``q[n, 2j]`` in its low nibble and ``q[n, 2j + 1]`` in its high nibble, each as a 4-bit two's
complement value (``-8`` is ``0b1000``, ``-1`` is ``0b1111``). Group ``g`` of row ``n`` is therefore
the ``group_size // 2`` contiguous bytes ``packed[n, g * group_size // 2 : (g + 1) * group_size // 2]``
(64 bytes for groups of 128): groups are laid out one after another along each row, so a kernel
streams whole groups with wide, aligned loads and finds the group's scale at one address.

``scales``: shape ``(N, K // group_size)``, row-major and contiguous; ``scales[n, g]`` belongs to
the bytes above.

Byte model (``Int4Weight.nbytes``): ``N * K / 2`` packed bytes plus
``N * (K / group_size) * scale_element_size`` scale bytes. No zero points (symmetric).

``q * scale`` needs up to 14 significant bits (4 from ``q``, up to 11 from an FP16 scale), so it is
not always representable in BF16 or FP16: ``dequantize(torch.float32)`` gives the exact matrix the
weight stands for and is what references must use; ``dequantize()`` rounds once to the scales'
dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Int4Weight", "quantize_int4", "pack_int4", "unpack_int4", "INT4_MIN", "INT4_MAX"]

INT4_MIN = -8
INT4_MAX = 7
_QMAX = 7.0  # scale = absmax / 7: symmetric, so +absmax maps to +7 and -absmax to -7

_WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_SCALE_DTYPES = (torch.float16, torch.bfloat16)
_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def scale_dtype_for(weight_dtype: torch.dtype) -> torch.dtype:
    """The dtype scales are stored in for a weight of ``weight_dtype`` (FP32 -> BF16)."""
    if weight_dtype == torch.float16:
        return torch.float16
    if weight_dtype in (torch.bfloat16, torch.float32):
        return torch.bfloat16
    raise TypeError(
        f"weight has dtype {_name(weight_dtype)}; quantize_int4 supports float16, bfloat16 and "
        "float32 weights. Convert it first, e.g. weight.to(torch.bfloat16)"
    )


def check_group_size(group_size) -> int:
    # Multiples of 16: the tensor-core GEMV tiles K in steps of 16, and on the H200 a group of 6
    # (one 8-lane padded tile) gave wrong results there (results/h200-session2/), while 32-256
    # passed; common group sizes (32, 64, 128, 256) all qualify.
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise TypeError(
            f"group_size must be a positive int multiple of 16 (e.g. 128), got {type(group_size).__name__}"
        )
    if group_size <= 0 or group_size % 16:
        raise ValueError(
            f"group_size must be a positive multiple of 16, e.g. 128 (the kernels step K by 16); "
            f"got {group_size}"
        )
    return group_size


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Pack integer values in [-8, 7] two per byte along the last dim (even index -> low nibble).

    ``q``: an integer tensor (int8 expected) whose last dimension is even. Returns ``uint8`` with
    the last dimension halved. Raises ValueError for values outside [-8, 7].
    """
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor, got {type(q).__name__}")
    if q.dtype not in _INT_DTYPES:
        raise TypeError(
            f"q has dtype {_name(q.dtype)}; pack_int4 packs integer values in [-8, 7]. "
            "Round and convert first, e.g. q.round().to(torch.int8)"
        )
    if q.dim() == 0 or q.shape[-1] % 2:
        raise ValueError(
            f"q must have an even last dimension (two values per byte), got shape {tuple(q.shape)}"
        )
    if q.numel() and _has_data(q) and (int(q.min()) < INT4_MIN or int(q.max()) > INT4_MAX):
        raise ValueError(
            f"q has values in [{int(q.min())}, {int(q.max())}]; INT4 holds [{INT4_MIN}, {INT4_MAX}]. "
            "Clamp first, e.g. q.clamp(-8, 7)"
        )
    q = q.to(torch.int16)
    lo = q[..., 0::2] & 0xF  # two's complement nibble: -1 -> 0b1111, -8 -> 0b1000
    hi = q[..., 1::2] & 0xF
    return (lo | (hi << 4)).to(torch.uint8)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_int4`: ``uint8 (..., K // 2)`` -> ``int8 (..., K)`` in [-8, 7]."""
    if not isinstance(packed, torch.Tensor):
        raise TypeError(f"packed must be a torch.Tensor, got {type(packed).__name__}")
    if packed.dtype != torch.uint8:
        raise TypeError(
            f"packed has dtype {_name(packed.dtype)}; INT4 weights are packed as uint8 "
            "(use pack_int4 to build them)"
        )
    if packed.dim() == 0:
        raise ValueError("packed must have at least one dimension")
    p = packed.to(torch.int16)
    lo = ((p & 0xF) ^ 8) - 8  # sign-extend the 4-bit two's complement value
    hi = ((p >> 4) ^ 8) - 8
    return torch.stack((lo, hi), dim=-1).flatten(-2).to(torch.int8)


@dataclass(frozen=True)
class Int4Weight:
    """An INT4 weight: ``packed`` (uint8, ``(N, K // 2)``), ``scales`` (``(N, K // group_size)``,
    BF16 or FP16), ``shape = (N, K)``, ``group_size``. See the module docstring for the layout."""

    packed: torch.Tensor
    scales: torch.Tensor
    shape: tuple[int, int]
    group_size: int

    def __post_init__(self):
        check_group_size(self.group_size)
        if not (isinstance(self.packed, torch.Tensor) and isinstance(self.scales, torch.Tensor)):
            raise TypeError("packed and scales must be torch.Tensors")
        shape = tuple(int(s) for s in self.shape)
        if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
            raise ValueError(f"shape must be (N, K) with N, K >= 1, got {self.shape}")
        object.__setattr__(self, "shape", shape)
        n, k = shape
        if k % self.group_size:
            raise ValueError(
                f"K={k} is not a multiple of group_size={self.group_size}; K must be a multiple "
                f"of {self.group_size}"
            )
        if self.packed.dtype != torch.uint8:
            raise TypeError(f"packed must be uint8, got {_name(self.packed.dtype)}")
        if tuple(self.packed.shape) != (n, k // 2):
            raise ValueError(
                f"packed has shape {tuple(self.packed.shape)}; expected (N, K // 2) = {(n, k // 2)}"
            )
        if self.scales.dtype not in _SCALE_DTYPES:
            raise TypeError(
                f"scales must be float16 or bfloat16, got {_name(self.scales.dtype)}; "
                "convert with scales.to(torch.bfloat16)"
            )
        if tuple(self.scales.shape) != (n, k // self.group_size):
            raise ValueError(
                f"scales has shape {tuple(self.scales.shape)}; expected (N, K // group_size) = "
                f"{(n, k // self.group_size)}"
            )
        if self.packed.device != self.scales.device:
            raise ValueError(
                f"packed is on {self.packed.device} but scales is on {self.scales.device}; "
                "put both on the same device"
            )
        if not (self.packed.is_contiguous() and self.scales.is_contiguous()):
            raise ValueError(
                "packed and scales must be contiguous (the kernels read the group-major layout); "
                "pass packed.contiguous() and scales.contiguous()"
            )

    @property
    def device(self) -> torch.device:
        return self.packed.device

    @property
    def dtype(self) -> torch.dtype:
        """The scales' dtype: activations used with this weight must have it."""
        return self.scales.dtype

    @property
    def nbytes(self) -> int:
        """Bytes in memory per the byte model: packed nibbles plus scales."""
        return self.packed.numel() + self.scales.numel() * self.scales.element_size()

    def to(self, device) -> Int4Weight:
        return Int4Weight(
            self.packed.to(device), self.scales.to(device), self.shape, self.group_size
        )

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The ``(N, K)`` matrix ``q * scale``. Exact in float32 (and float64); in the scales'
        dtype (the default) each element is rounded once."""
        q = unpack_int4(self.packed).to(torch.float32)
        s = self.scales.to(torch.float32).repeat_interleave(self.group_size, dim=1)
        return (q * s).to(dtype or self.scales.dtype)


def _has_data(t: torch.Tensor) -> bool:
    """False for meta and fake tensors (shapes only): quantizing them gives a shapes-only weight."""
    from torch._subclasses.fake_tensor import FakeTensor

    return not (t.is_meta or isinstance(t, FakeTensor))


def quantize_int4(weight: torch.Tensor, group_size: int = 128) -> Int4Weight:
    """Quantize a 2-D ``(N, K)`` weight to symmetric INT4 with one scale per ``group_size`` values
    along ``K``. Works on any device (plain PyTorch; meant for offline preparation)."""
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    sdtype = scale_dtype_for(weight.dtype)
    group_size = check_group_size(group_size)
    if weight.dim() != 2:
        raise ValueError(
            f"weight must be 2-D (N, K) like nn.Linear.weight, got shape {tuple(weight.shape)}"
        )
    n, k = weight.shape
    if n < 1 or k < 1:
        raise ValueError(f"weight must be non-empty, got shape {tuple(weight.shape)}")
    if k % group_size:
        raise ValueError(
            f"weight has K={k} columns, not a multiple of group_size={group_size}; K must be a "
            f"multiple of {group_size} (pad the weight or pick a group_size that divides {k})"
        )
    if _has_data(weight) and not bool(torch.isfinite(weight).all()):
        raise ValueError("weight contains inf or NaN; INT4 scales need finite values")
    w = weight.detach().to(torch.float64).reshape(n, k // group_size, group_size)
    absmax = w.abs().amax(dim=-1)
    scales = (absmax / _QMAX).to(sdtype)  # rounded once to the stored dtype
    s = scales.to(torch.float64).unsqueeze(-1)
    safe = torch.where(s > 0, s, torch.ones_like(s))
    q = torch.where(s > 0, torch.round(w / safe), torch.zeros_like(w))  # zero group -> q = 0
    q = q.clamp(INT4_MIN, INT4_MAX).to(torch.int8).reshape(n, k)
    return Int4Weight(pack_int4(q).contiguous(), scales.contiguous(), (n, k), group_size)
