"""Train a small classifier through every warpgauge operator, beside a plain-PyTorch twin.

Both models start from the same weights, see the same synthetic batches (generated from a seed
on the CPU, so every device gets identical data) and use the same optimizer. They differ only
in the operators: the warpgauge model calls ``wg.gemm``, ``wg.int4_linear``, ``wg.add_rms_norm``,
``wg.softmax``, ``wg.add`` and ``wg.row_sum``; the twin calls the PyTorch ops that implement the
same numerical contracts (FP32 math, one rounding; ``torch.mm`` with cuBLAS's reduced-precision
reductions turned off while training, so it accumulates in FP32 like ``wg.gemm``). If every
forward and backward kernel is right, the two loss curves stay within 0.5% of each other at
every step.

The model (rows = batch * tokens, H hidden features):

    xin = add(x, pos)                        learned positional embedding
    a   = gemm(xin, W_in)                    token projection, D -> H
    q   = int4_linear(a, Q)                  frozen INT4 projection, H -> H (grad flows to a only)
    y1, h1 = add_rms_norm(q, a, g1)          residual block 1 (h1 = q + a carries on)
    b   = silu(gemm(y1, W_mid))              MLP, H -> H
    y2, h2 = add_rms_norm(b, h1, g2)         residual block 2
    att = softmax(gemm(y2, W_att) over tokens)   attention-like pooling weights, one per head
    pooled = row_sum(att * y2 over tokens)   per-head weighted sum of the tokens
    probs  = softmax(gemm(pooled, W_out))    output probabilities (FP32)
    loss   = mean(-log(row_sum(onehot * probs)))

Master weights are FP32; every forward casts them to the compute dtype, so gradients come back
through the casts to FP32 (mixed precision). GEMM and INT4 kernels take FP16/BF16 operands: with
``--dtype float32`` the row operators run in FP32 and the matrix products in FP16.

Usage:
    PYTHONPATH=src python3 examples/train_tiny.py --steps 120 --device cuda --dtype bfloat16 \\
        --out results/train_tiny [--compile]
    TRITON_INTERPRET=1 PYTHONPATH=src python3 examples/train_tiny.py --tiny --device cpu \\
        --dtype float16 --steps 6 --out /tmp/train_tiny

``run(...)`` returns ``{"losses_wg", "losses_ref", "max_rel_gap", ...}``; tests import it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import warpgauge as wg
from warpgauge.quant import quantize_int4

MAX_REL_GAP = 0.005  # the requirement: |loss_wg - loss_ref| / |loss_ref| <= 0.5% at every step

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass(frozen=True)
class Sizes:
    batch: int  # samples per step
    tokens: int  # tokens per sample
    d_in: int  # input features per token
    hidden: int  # H: a multiple of the INT4 group size
    heads: int  # attention-pooling heads (hidden % heads == 0)
    classes: int
    group_size: int  # INT4 group along K (= hidden)


# A batch of 512 and lr 0.04 keep BF16 rounding differences from compounding: with a stand-in for
# a different kernel (FP64-accumulated products, rounded once) the two BF16 curves stayed within
# 0.14% over 120 steps on a CPU; batch 256 with lr 0.05 drifted to 0.55% by step 110.
FULL = Sizes(batch=512, tokens=16, d_in=64, hidden=256, heads=4, classes=10, group_size=128)
# Small enough for the Triton interpreter on a CPU (a few seconds per step), still reaching every
# operator with more than one program per kernel.
TINY = Sizes(batch=16, tokens=8, d_in=32, hidden=128, heads=2, classes=6, group_size=128)


# ------------------------------------------------------------------------------ the two backends


class WarpgaugeOps:
    """The operators under test."""

    name = "warpgauge"

    @staticmethod
    def gemm(a, b):
        return wg.gemm(a, b)

    @staticmethod
    def int4_linear(x, qweight, w_dequant_f32):
        return wg.int4_linear(x, qweight)

    @staticmethod
    def add_rms_norm(x, residual, weight, eps):
        return wg.add_rms_norm(x, residual, weight, eps)

    @staticmethod
    def softmax(x):
        return wg.softmax(x)

    @staticmethod
    def add(x, y):
        return wg.add(x, y)

    @staticmethod
    def row_sum(x, out_dtype=None):
        return wg.row_sum(x, out_dtype)


class TorchOps:
    """Plain PyTorch with the same contracts: FP32 math and one rounding to the output dtype."""

    name = "pytorch"

    @staticmethod
    def gemm(a, b):
        return torch.mm(a, b)  # FP32 accumulation in cuBLAS / CPU BLAS, one rounding

    @staticmethod
    def int4_linear(x, qweight, w_dequant_f32):
        # The exact dequantized weight (q * scale is exact in FP32), FP32 product, one rounding.
        return F.linear(x.float(), w_dequant_f32).to(x.dtype)

    @staticmethod
    def add_rms_norm(x, residual, weight, eps):
        h = (x.float() + residual.float()).to(x.dtype)
        hf = h.float()
        y = hf * torch.rsqrt(hf.square().mean(-1, keepdim=True) + eps) * weight.float()
        return y.to(x.dtype), h

    @staticmethod
    def softmax(x):
        return torch.softmax(x.float(), -1).to(x.dtype)

    @staticmethod
    def add(x, y):
        return (x.float() + y.float()).to(x.dtype)

    @staticmethod
    def row_sum(x, out_dtype=None):
        return x.float().sum(-1).to(out_dtype or x.dtype)


# ----------------------------------------------------------------------------------- the model


class TinyClassifier(torch.nn.Module):
    def __init__(self, ops, sizes: Sizes, init: dict, qweight, dtype: torch.dtype, eps=1e-6):
        super().__init__()
        self.ops = ops
        self.sizes = sizes
        self.cd = dtype  # compute dtype of activations and row operators
        self.md = dtype if dtype in (torch.float16, torch.bfloat16) else torch.float16
        self.eps = eps
        # FP32 master weights: both twins get copies of the same tensors.
        self.params = torch.nn.ParameterDict(
            {k: torch.nn.Parameter(v.detach().clone()) for k, v in init.items()}
        )
        self.qweight = qweight  # frozen INT4 projection (no parameters)
        self.register_buffer("w_dequant_f32", qweight.dequantize(torch.float32), persistent=False)

    def forward(self, x: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        ops, p, s = self.ops, self.params, self.sizes
        cd, md = self.cd, self.md
        B, T, D = x.shape
        H, nh = s.hidden, s.heads
        pos = p["pos"].to(cd).unsqueeze(0).expand(B, T, D).contiguous()
        xin = ops.add(x, pos).reshape(B * T, D)
        a = ops.gemm(xin.to(md), p["w_in"].to(md)).to(cd)
        q = ops.int4_linear(a.to(md), self.qweight, self.w_dequant_f32).to(cd)
        y1, h1 = ops.add_rms_norm(q, a, p["g1"].to(cd), self.eps)
        b = F.silu(ops.gemm(y1.to(md), p["w_mid"].to(md)).to(cd))
        y2, _h2 = ops.add_rms_norm(b, h1, p["g2"].to(cd), self.eps)
        # Attention-like pooling: per head, a softmax over the tokens weighs each token's features.
        scores = ops.gemm(y2.to(md), p["w_att"].to(md)).to(cd)  # (B*T, nh)
        att = ops.softmax(scores.view(B, T, nh).transpose(1, 2).contiguous())  # (B, nh, T)
        feats = y2.view(B, T, nh, H // nh).permute(0, 2, 3, 1)  # (B, nh, H/nh, T)
        pooled = ops.row_sum((att.unsqueeze(2) * feats).contiguous())  # (B, nh, H/nh)
        logits = ops.gemm(pooled.reshape(B, H).to(md), p["w_out"].to(md))  # (B, C)
        probs = ops.softmax(logits.float())  # output probabilities in FP32
        p_true = ops.row_sum(onehot * probs)  # probability of the right class
        return -torch.log(p_true).mean()


def init_weights(sizes: Sizes, seed: int) -> tuple[dict, torch.Tensor]:
    """FP32 initial weights (CPU, seeded) and the FP32 weight the INT4 projection quantizes."""
    g = torch.Generator().manual_seed(seed)
    s = sizes

    def rnd(*shape, scale):
        return torch.randn(*shape, generator=g) * scale

    init = {
        "pos": rnd(s.tokens, s.d_in, scale=0.1),
        "w_in": rnd(s.d_in, s.hidden, scale=1 / math.sqrt(s.d_in)),
        "w_mid": rnd(s.hidden, s.hidden, scale=1 / math.sqrt(s.hidden)),
        "w_att": rnd(s.hidden, s.heads, scale=1 / math.sqrt(s.hidden)),
        "w_out": rnd(s.hidden, s.classes, scale=1 / math.sqrt(s.hidden)),
        "g1": torch.ones(s.hidden),
        "g2": torch.ones(s.hidden),
    }
    w_frozen = rnd(s.hidden, s.hidden, scale=1 / math.sqrt(s.hidden))
    return init, w_frozen


class Data:
    """Synthetic classification: each class has a prototype sequence; a sample is its class's
    prototype plus Gaussian noise. Batch ``i`` depends only on (seed, i), generated on the CPU."""

    def __init__(self, sizes: Sizes, seed: int, signal: float = 0.3, noise: float = 1.0):
        # signal/noise chosen so that classes overlap: the loss falls from ~2.4 to ~0.5 over 120
        # steps instead of collapsing towards 0, where a relative gap would measure only noise.
        self.sizes, self.seed, self.noise = sizes, seed, noise
        g = torch.Generator().manual_seed(seed + 1)
        self.protos = signal * torch.randn(sizes.classes, sizes.tokens, sizes.d_in, generator=g)

    def batch(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.sizes
        g = torch.Generator().manual_seed(self.seed * 100_003 + 17 + i)
        labels = torch.randint(0, s.classes, (s.batch,), generator=g)
        x = self.protos[labels] + self.noise * torch.randn(s.batch, s.tokens, s.d_in, generator=g)
        return x, labels


# ------------------------------------------------------------------------------------ training


def _optimizer(name: str, params, lr: float):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, foreach=False)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, foreach=False)
    raise ValueError(f"optimizer must be 'sgd' or 'adam', got {name!r}")


class _fp32_reductions:
    """The twin's torch.mm accumulates in FP32 like the contract: cuBLAS's reduced-precision
    (FP16/BF16) split-K reductions are disabled while training, and restored afterwards."""

    def __enter__(self):
        m = torch.backends.cuda.matmul
        self.saved = (
            m.allow_bf16_reduced_precision_reduction,
            m.allow_fp16_reduced_precision_reduction,
        )
        m.allow_bf16_reduced_precision_reduction = False
        m.allow_fp16_reduced_precision_reduction = False

    def __exit__(self, *exc):
        m = torch.backends.cuda.matmul
        m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction = (
            self.saved
        )


def run(
    steps: int = 120,
    device: str = "cuda",
    dtype: str | torch.dtype = "bfloat16",
    compile: bool = False,
    tiny: bool = False,
    out: str | os.PathLike | None = None,
    seed: int = 0,
    optimizer: str = "sgd",
    lr: float | None = None,
    progress: bool = False,
) -> dict:
    """Train both models for ``steps`` steps; returns per-step losses and the largest relative gap.

    ``compile=True`` wraps the warpgauge model in ``torch.compile(fullgraph=True)`` (forward and,
    through AOTAutograd, backward); the twin always runs eagerly. With ``out`` set, writes
    ``train_tiny.json`` and ``train_tiny.png`` there.
    """
    dt = DTYPES[dtype] if isinstance(dtype, str) else dtype
    if dt not in DTYPES.values():
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype}")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "train_tiny: --device cuda was requested but CUDA is not available. Run on a GPU, or "
            "use --device cpu --tiny with TRITON_INTERPRET=1 (Triton's CPU interpreter)."
        )
    if lr is None:
        lr = 0.04 if optimizer == "sgd" else 1e-3
    sizes = TINY if tiny else FULL
    md = dt if dt in (torch.float16, torch.bfloat16) else torch.float16
    init, w_frozen = init_weights(sizes, seed)
    qweight = quantize_int4(w_frozen.to(md), group_size=sizes.group_size).to(dev)
    init = {k: v.to(dev) for k, v in init.items()}
    model_wg = TinyClassifier(WarpgaugeOps, sizes, init, qweight, dt).to(dev)
    model_ref = TinyClassifier(TorchOps, sizes, init, qweight, dt).to(dev)
    opt_wg = _optimizer(optimizer, model_wg.parameters(), lr)
    opt_ref = _optimizer(optimizer, model_ref.parameters(), lr)
    loss_wg_fn = torch.compile(model_wg, fullgraph=True) if compile else model_wg
    data = Data(sizes, seed)

    losses_wg: list[float] = []
    losses_ref: list[float] = []
    gaps: list[float] = []
    t0 = time.perf_counter()
    with _fp32_reductions():
        for i in range(steps):
            x_cpu, labels = data.batch(i)
            x = x_cpu.to(device=dev, dtype=dt)
            onehot = F.one_hot(labels, sizes.classes).to(device=dev, dtype=torch.float32)
            for fn, opt, losses in (
                (loss_wg_fn, opt_wg, losses_wg),
                (model_ref, opt_ref, losses_ref),
            ):
                opt.zero_grad(set_to_none=True)
                loss = fn(x, onehot)
                loss.backward()
                opt.step()
                losses.append(loss.detach().item())
            a, b = losses_wg[-1], losses_ref[-1]
            gap = abs(a - b) / abs(b) if b != 0 else (0.0 if a == 0 else math.inf)
            gaps.append(gap if math.isfinite(a) and math.isfinite(b) else math.inf)
            if progress and (i % 10 == 0 or i == steps - 1):
                print(
                    f"step {i:4d}  loss warpgauge {a:.5f}  pytorch {b:.5f}  gap {gaps[-1]:.2e}",
                    flush=True,
                )
    elapsed = time.perf_counter() - t0
    result = {
        "losses_wg": losses_wg,
        "losses_ref": losses_ref,
        "max_rel_gap": max(gaps) if gaps else 0.0,
        "rel_gaps": gaps,
        "worst_step": int(max(range(len(gaps)), key=gaps.__getitem__)) if gaps else None,
        "passed": bool(gaps) and max(gaps) <= MAX_REL_GAP,
        "config": {
            "steps": steps,
            "device": str(dev),
            "dtype": str(dt).replace("torch.", ""),
            "matmul_dtype": str(md).replace("torch.", ""),
            "compile": compile,
            "tiny": tiny,
            "seed": seed,
            "optimizer": optimizer,
            "lr": lr,
            "sizes": asdict(sizes),
            "max_rel_gap_allowed": MAX_REL_GAP,
        },
        "seconds": elapsed,
    }
    if out is not None:
        write_outputs(Path(out), result)
    return result


# ------------------------------------------------------------------------------------- outputs


def _provenance() -> dict:
    try:
        from warpgauge.environment import provenance

        return provenance()
    except ImportError:  # an older checkout without environment.py: record the essentials
        import triton

        return {
            "packages": {"torch": torch.__version__, "triton": triton.__version__},
            "gpu": {"name": torch.cuda.get_device_name()} if torch.cuda.is_available() else None,
        }


def _finite(obj):
    """JSON has no NaN/Infinity: a diverged run records null (and fails the requirement)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def write_outputs(out: Path, result: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    c = result["config"]
    tag = "train_tiny" + ("_compiled" if c["compile"] else "")
    record = {
        "what": "examples/train_tiny.py: warpgauge model vs plain-PyTorch twin, per-step losses",
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "provenance": _provenance(),
        **{k: v for k, v in result.items()},
    }
    text = json.dumps(_finite(record), indent=1, default=str, allow_nan=False)
    (out / f"{tag}.json").write_text(text + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = range(len(result["losses_wg"]))
    fig, (ax, ax2) = plt.subplots(
        2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    ax.plot(steps, result["losses_ref"], label="PyTorch twin", lw=2.5, alpha=0.6)
    ax.plot(steps, result["losses_wg"], label="warpgauge", lw=1.2, ls="--")
    ax.set_ylabel("training loss")
    ax.set_title(
        f"train_tiny: {c['dtype']}{', compiled' if c['compile'] else ''}, {c['optimizer']}, "
        f"{c['device']}"
    )
    ax.legend()
    ax2.plot(steps, [100 * g if math.isfinite(g) else float("nan") for g in result["rel_gaps"]])
    ax2.axhline(100 * MAX_REL_GAP, color="red", ls=":", label="0.5% limit")
    ax2.set_ylabel("relative gap (%)")
    ax2.set_xlabel("step")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(out / f"{tag}.png", dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    ap.add_argument(
        "--compile", action="store_true", help="torch.compile(fullgraph=True) the model"
    )
    ap.add_argument("--tiny", action="store_true", help="small sizes for the CPU interpreter")
    ap.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="directory for train_tiny[_compiled].{json,png}")
    args = ap.parse_args(argv)
    res = run(
        steps=args.steps,
        device=args.device,
        dtype=args.dtype,
        compile=args.compile,
        tiny=args.tiny,
        out=args.out,
        seed=args.seed,
        optimizer=args.optimizer,
        lr=args.lr,
        progress=True,
    )
    lw, lr_ = res["losses_wg"], res["losses_ref"]
    print()
    print("| | first loss | last loss | max relative gap (step) |")
    print("|---|---|---|---|")
    print(
        f"| warpgauge | {lw[0]:.4f} | {lw[-1]:.4f} | {res['max_rel_gap']:.3e} ({res['worst_step']}) |"
    )
    print(f"| PyTorch twin | {lr_[0]:.4f} | {lr_[-1]:.4f} | |")
    print(f"{len(lw)} steps in {res['seconds']:.1f} s; wrote {args.out}")
    if not res["passed"]:
        print(
            f"FAIL: the curves differ by {100 * res['max_rel_gap']:.3f}% at step "
            f"{res['worst_step']}; the requirement is <= {100 * MAX_REL_GAP}% at every step",
            file=sys.stderr,
        )
        return 1
    print(f"PASS: within {100 * MAX_REL_GAP}% at every step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
