"""Decode tokens per second at batch 1: a Llama model as Hugging Face ships it, against the same
model switched to warpgauge (``apply_warpgauge``), with and without INT4 weights, against
PyTorch's own INT4 path (tinygemm, ``torch._weight_int4pack_mm``), eager and compiled
(``torch.compile(mode="reduce-overhead")`` with a static cache: CUDA graphs).

The model is built from a ``LlamaConfig`` with random weights (no download). Every variant starts
from the same BF16 weights; the INT4 variants share one quantization (warpgauge's symmetric INT4,
group 128), so warpgauge and tinygemm run the same matrix.

Decode rate: ``generate`` is timed for ``1`` and ``1 + tokens`` new tokens (greedy, no EOS) and
``tokens / (t(1 + tokens) - t(1))`` is the decode rate: prefill and setup cancel out. Each timing
is repeated ``--reps`` times after a warm-up (which compiles); the median is reported with p10/p90.

    python examples/decode_tokens.py --out decode.json               # a 1B-class model
    python examples/decode_tokens.py --quick --out decode.json       # 4 layers, eager only

Writes one JSON document (schema ``warpgauge.example.decode_tokens/1``) and prints a table.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

PRESETS = {  # Llama-3.2-1B widths (hidden 2048, 16 layers, GQA 32/8, vocab 128256)
    "1b": dict(hidden=2048, inter=8192, layers=16, heads=32, kv=8, vocab=128256),
    "quick": dict(hidden=2048, inter=8192, layers=4, heads=32, kv=8, vocab=32000),
}
VARIANTS = ("hf", "warpgauge", "warpgauge-int4", "torch-int4")


def build_model(p: dict, seed: int):
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=p["vocab"],
        hidden_size=p["hidden"],
        intermediate_size=p["inter"],
        num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"],
        num_key_value_heads=p["kv"],
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
    )
    torch.manual_seed(seed)
    with torch.device("cuda"):
        m = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    return m


class TinygemmLinear(torch.nn.Module):
    """PyTorch's INT4 weight-only linear (tinygemm) holding warpgauge's quantized weight."""

    def __init__(self, qlinear):
        super().__init__()
        from warpgauge.bench.providers import tinygemm_layout

        packed, group, sz = tinygemm_layout(qlinear.qweight)
        self.register_buffer("packed", packed)
        self.register_buffer("sz", sz)
        self.group, self.out_features = group, qlinear.out_features
        self.bias = qlinear.bias

    def forward(self, x):
        lead = x.shape[:-1]
        y = torch.ops.aten._weight_int4pack_mm(
            x.reshape(-1, x.shape[-1]), self.packed, self.group, self.sz
        )
        y = y.reshape(*lead, self.out_features)
        return y if self.bias is None else y + self.bias


def make_variant(base, name: str, group: int):
    from warpgauge.integrations.transformers import apply_warpgauge
    from warpgauge.nn import Int4Linear

    m = copy.deepcopy(base)
    if name == "hf":
        return m
    if name == "warpgauge":
        return apply_warpgauge(m)
    if name == "warpgauge-int4":
        return apply_warpgauge(m, int4=True, group_size=group)
    if name == "torch-int4":  # same quantization, PyTorch's kernel; norms stay HF's
        apply_warpgauge(m, rms_norm=False, int4=True, group_size=group)
        checked = False
        for parent in list(m.modules()):
            for child_name, child in list(parent.named_children()):
                if isinstance(child, Int4Linear):
                    tg = TinygemmLinear(child)
                    if not checked:  # the conversion is right: same numbers as warpgauge's kernel
                        from warpgauge.reference import assert_close

                        x = torch.randn(1, child.in_features, device="cuda").to(torch.bfloat16)
                        assert_close(tg(x), child(x), msg="tinygemm vs warpgauge INT4")
                        checked = True
                    setattr(parent, child_name, tg)
        return m
    raise ValueError(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}")


def time_decode(model, ids, tokens: int, reps: int, compiled: bool) -> dict:
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    if compiled:
        kw["cache_implementation"] = "static"

    def gen(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
        torch.cuda.synchronize()
        return time.perf_counter() - t0, out

    t_warm = time.perf_counter()
    _, out = gen(1 + tokens)  # warm-up: compiles (and captures graphs) when compiled
    gen(1)
    warm_s = time.perf_counter() - t_warm
    rates = []
    for _ in range(reps):
        t1, _ = gen(1)
        tn, _ = gen(1 + tokens)
        rates.append(tokens / max(tn - t1, 1e-9))
    return _summary(rates, warm_s, out[0, ids.shape[1] :].tolist())


def _summary(rates: list[float], warm_s: float, generated: list[int]) -> dict:
    rates = sorted(rates)
    q = statistics.quantiles(rates, n=10) if len(rates) >= 2 else [rates[0]] * 9
    med = statistics.median(rates)
    return {
        "tokens_per_s": med,
        "ms_per_token": 1e3 / med,
        "p10_tokens_per_s": q[0],
        "p90_tokens_per_s": q[-1],
        "samples_tokens_per_s": rates,
        "warmup_s": warm_s,
        "generated": generated,
    }


def _static_cache(model, max_len: int):
    """A StaticCache for batch 1 across transformers versions (their constructors differ)."""
    import inspect

    import transformers

    params = inspect.signature(transformers.StaticCache.__init__).parameters
    kw = {"config": model.config, "max_cache_len": max_len}
    for name, value in (("max_batch_size", 1), ("device", "cuda"), ("dtype", torch.bfloat16)):
        if name in params:
            kw[name] = value
    return transformers.StaticCache(**kw)


def time_decode_steps(model, ids, tokens: int, reps: int, graphs: bool) -> dict:
    """Greedy decode as a loop of single-token model steps over a static KV cache: eager steps,
    or one step captured as a CUDA graph and replayed (what reduce-overhead does, without the
    compiler). Rate = tokens / time of the loop; generate()'s own per-token work is not in it."""
    P = ids.shape[1]
    cache = _static_cache(model, P + tokens + 8)

    def step(tok, pos):
        out = model(
            input_ids=tok,
            past_key_values=cache,
            cache_position=pos,
            position_ids=pos.unsqueeze(0),
            use_cache=True,
        )
        return out.logits[:, -1, :].argmax(-1, keepdim=True)

    def prefill():
        # reset() zeroes the cache in place (a captured graph keeps its addresses) and restarts
        # its write position: some transformers versions keep it in the cache (a device tensor),
        # ignoring cache_position, so every run starts from a fresh prefill.
        cache.reset()
        return step(ids, torch.arange(P, device="cuda"))

    t_warm = time.perf_counter()
    first = prefill()
    s_tok, s_pos = first.clone(), torch.tensor([P], device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside any capture (allocations, lazy inits)
        for _ in range(2):
            step(s_tok, s_pos)
    torch.cuda.current_stream().wait_stream(side)
    first = prefill()
    if graphs:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            s_next = step(s_tok, s_pos)

        def one():
            graph.replay()
            s_tok.copy_(s_next)
            s_pos.add_(1)
    else:

        def one():
            s_tok.copy_(step(s_tok, s_pos))
            s_pos.add_(1)

    def run(n):
        s_tok.copy_(prefill())  # untimed
        s_pos.fill_(P)
        generated = torch.empty(n, dtype=torch.long, device=s_tok.device)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(n):
            one()
            generated[i : i + 1].copy_(s_tok.view(-1))  # one tiny copy per token, both modes
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        return dt, generated.tolist()

    run(tokens)
    warm_s = time.perf_counter() - t_warm
    rates, gen = [], []
    for _ in range(reps):
        dt, gen = run(tokens)
        rates.append(tokens / dt)
    return _summary(rates, warm_s, [int(first)] + gen[:-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="1b")
    ap.add_argument("--quick", action="store_true", help="preset quick, eager only, few tokens")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument(
        "--modes",
        default="eager,step,graphs,compiled",
        help="eager: generate(); step: a loop of model steps over a static cache; graphs: that "
        "step as a replayed CUDA graph; compiled: generate() with torch.compile(reduce-overhead)",
    )
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    ap.add_argument("--tokens", type=int, default=64, help="decode tokens timed")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--group-size", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("decode_tokens.json"))
    a = ap.parse_args(argv)
    if a.quick:
        a.preset, a.modes, a.tokens, a.reps = "quick", "eager,step,graphs", 32, 3
    if not torch.cuda.is_available():
        print(
            "decode_tokens: no CUDA GPU is visible here; this example measures on a GPU",
            file=sys.stderr,
        )
        return 2
    t_start = time.perf_counter()

    def say(msg):
        print(f"[decode {time.perf_counter() - t_start:6.1f}s] {msg}", file=sys.stderr, flush=True)

    import transformers
    import triton

    say(f"imported transformers {transformers.__version__}")
    preset = PRESETS[a.preset]
    base = build_model(preset, a.seed)
    say(f"built the {a.preset} model")
    g = torch.Generator(device="cuda").manual_seed(a.seed)
    ids = torch.randint(0, preset["vocab"], (1, a.prompt), device="cuda", generator=g)
    doc = {
        "schema": "warpgauge.example.decode_tokens/1",
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": {**preset, "preset": a.preset, "batch": 1, "prompt": a.prompt,
                   "tokens": a.tokens, "reps": a.reps, "group_size": a.group_size,
                   "dtype": "bfloat16", "weights": f"random (LlamaConfig, seed {a.seed})"},
        "environment": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                        "triton": triton.__version__, "transformers": transformers.__version__},
        "method": {
            "eager, compiled": "tokens / (t(generate 1+tokens) - t(generate 1)), median of reps",
            "step, graphs": "tokens / t(loop of single-token steps, static cache), median of reps",
        },
        "results": [],
    }  # fmt: skip
    for variant in a.variants.split(","):
        for mode in a.modes.split(","):
            row = {"variant": variant, "mode": mode}
            say(f"{variant} {mode} ...")
            try:
                m = make_variant(base, variant, a.group_size)
                if mode == "compiled":
                    m.forward = torch.compile(m.forward, mode="reduce-overhead")
                with torch.no_grad():
                    if mode in ("step", "graphs"):
                        row.update(time_decode_steps(m, ids, a.tokens, a.reps, mode == "graphs"))
                    else:
                        row.update(time_decode(m, ids, a.tokens, a.reps, mode == "compiled"))
                row["patched"] = getattr(m, "warpgauge_patched", None)
            except Exception as e:  # recorded in the result, the other variants still run
                row["error"] = f"{type(e).__name__}: {e}"
                row["traceback"] = traceback.format_exc(limit=6)
            finally:
                m = None
                torch._dynamo.reset()
                torch.cuda.empty_cache()
            doc["results"].append(row)
            say(f"{variant} {mode}: {row.get('tokens_per_s', row.get('error'))}")
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(doc, indent=1))  # after every row: nothing finished is lost
    eager = {r["variant"]: r.get("generated") for r in doc["results"] if r["mode"] == "eager"}
    for r in doc["results"]:  # the step loops must produce generate()'s greedy tokens
        if r["mode"] != "eager" and r.get("generated") and eager.get(r["variant"]):
            n = min(len(r["generated"]), len(eager[r["variant"]]))
            r["tokens_match_eager"] = r["generated"][:n] == eager[r["variant"]][:n]
    a.out.write_text(json.dumps(doc, indent=1))
    hf = {r["mode"]: r.get("tokens_per_s") for r in doc["results"] if r["variant"] == "hf"}
    print(f"{'variant':<16} {'mode':<9} {'tok/s':>9} {'ms/tok':>8} {'vs hf':>7} tokens=eager")
    for r in doc["results"]:
        if "error" in r:
            print(f"{r['variant']:<16} {r['mode']:<9} error: {r['error'][:80]}")
            continue
        ref = hf.get(r["mode"])
        rel = f"{r['tokens_per_s'] / ref:.2f}x" if ref else "-"
        print(f"{r['variant']:<16} {r['mode']:<9} {r['tokens_per_s']:9.1f} "
              f"{r['ms_per_token']:8.3f} {rel:>7} {r.get('tokens_match_eager', '-')}")  # fmt: skip
    return 0 if all("error" not in r for r in doc["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
