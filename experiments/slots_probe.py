"""Self-clearing statistics slots against a fill kernel per launch (GPU, session 19).

Runs at commits 4b88fd7 to f15af3b only: the self-clearing mechanism it measures
(``_rows.SELF_RESET``) was measured no faster and removed after (the CHANGELOG's session 19).

Every cooperative row kernel needs its statistics slots zeroed before it runs. Until session 19
each launch allocated them with ``torch.zeros`` (a fill kernel in front of the row kernel);
with ``_rows.SELF_RESET`` the kernels clear the slots they used (``slots_done`` /
``slots_clear``) and launches share one zeroed buffer per stream. This sweep times both in one
process: one CUDA graph per variant holding one public call, cold lane (``_cold.ColdLane``:
write+read flush before each replay) and warm lane (no flush), variants rotated sample by
sample, median of ``SAMPLES``. Outputs are checked bit-identical between the variants and
against an FP64 reference (max abs error printed). Prints one line per case.
"""

from __future__ import annotations

import statistics
import sys

import torch

sys.path.insert(0, "experiments")
from _cold import ColdLane  # noqa: E402

import warpgauge as wg  # noqa: E402
from warpgauge.kernels import _rows  # noqa: E402

SAMPLES = 41


def warm_medians(graphs, samples):
    times = {k: [] for k in graphs}
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    names = list(graphs)
    for i in range(samples):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            ev[0].record()
            graphs[name].replay()
            ev[1].record()
            torch.cuda.synchronize()
            times[name].append(ev[0].elapsed_time(ev[1]) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def case(op, rows, width):
    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    if op == "softmax":
        ref = torch.softmax(x.double(), -1)
        return (lambda: wg.softmax(x)), ref
    if op == "softmax_bwd":
        y = torch.softmax(x.float(), -1).to(torch.bfloat16)
        dy = torch.randn_like(x)
        from warpgauge.kernels.softmax_backward import softmax_backward

        yd = y.double()
        ref = yd * (dy.double() - (yd * dy.double()).sum(-1, keepdim=True))
        return (lambda: softmax_backward(y, dy)), ref
    r = torch.randn_like(x)
    w = torch.randn(width, device="cuda", dtype=torch.bfloat16)
    h = (x.double() + r.double()).to(torch.bfloat16).double()
    ref = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    return (lambda: wg.add_rms_norm(x, r, w)[0]), ref


def main() -> None:
    lane = ColdLane()
    cases = [
        ("softmax", 16, 262144), ("softmax", 64, 131072), ("softmax", 64, 128256),
        ("softmax", 64, 32769), ("softmax", 256, 65536), ("softmax", 1024, 65536),
        ("softmax", 1024, 151936), ("softmax", 128, 1048576), ("softmax", 4096, 131072),
        ("add_rms_norm", 8, 16384), ("add_rms_norm", 4, 32769), ("add_rms_norm", 64, 131072),
        ("add_rms_norm", 16, 1048576), ("add_rms_norm", 4096, 131072),
        ("softmax_bwd", 64, 131072), ("softmax_bwd", 1024, 65537),
    ]  # fmt: skip
    for op, rows, width in cases:
        fn, ref = case(op, rows, width)
        graphs, outs = {}, {}
        for name, flag in (("fill", False), ("self", True)):
            _rows.SELF_RESET = flag
            graphs[name], outs[name] = lane.graph(fn)
        _rows.SELF_RESET = True
        for g in graphs.values():
            g.replay()
            g.replay()
        torch.cuda.synchronize()
        same = torch.equal(outs["fill"], outs["self"])
        err = (outs["self"].double() - ref).abs().max().item()
        cold = lane.medians(graphs, SAMPLES)
        warm = warm_medians(graphs, SAMPLES)
        print(
            f"{op} {rows}x{width}: cold fill {cold['fill']:.2f} self {cold['self']:.2f} "
            f"({cold['self'] / cold['fill']:.3f}) | warm fill {warm['fill']:.2f} "
            f"self {warm['self']:.2f} ({warm['self'] / warm['fill']:.3f}) | "
            f"bit-identical {same} max-err {err:.2e}",
            flush=True,
        )
        del graphs, outs


if __name__ == "__main__":
    main()
