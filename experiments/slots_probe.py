"""What the zeroed statistics slots of a cooperative launch cost (GPU probe, session 19).

Each cooperative row kernel needs its slots zeroed before it runs (``_rows.coop_slots``:
``torch.zeros``, one fill kernel in front of the row kernel). This probe times, in one CUDA
graph per variant (cold lane of ``_cold.ColdLane`` and a warm lane without the flush), the
public call ``A`` and the same call with one more ``torch.zeros`` of the slots' size in front
``B``: ``B - A`` estimates what one fill node costs inside a graph. Prints one line per shape.
"""

from __future__ import annotations

import statistics
import sys

import torch

sys.path.insert(0, "experiments")
from _cold import ColdLane  # noqa: E402

import warpgauge as wg  # noqa: E402


def warm_medians(graphs, samples):
    times = {k: [] for k in graphs}
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    names = list(graphs)
    for i in range(samples):
        for name in names[i % len(names):] + names[: i % len(names)]:
            ev[0].record()
            graphs[name].replay()
            ev[1].record()
            torch.cuda.synchronize()
            times[name].append(ev[0].elapsed_time(ev[1]) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    lane = ColdLane()
    cases = [("softmax", 64, 131072), ("softmax", 16, 262144), ("softmax", 64, 128256),
             ("softmax", 256, 65536), ("softmax", 1024, 65536), ("add_rms_norm", 8, 16384),
             ("add_rms_norm", 64, 131072), ("row_sum", 64, 131072)]
    for op, rows, width in cases:
        x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
        r = torch.randn_like(x)
        w = torch.randn(width, device="cuda", dtype=torch.bfloat16)
        if op == "softmax":
            fn = lambda x=x: wg.softmax(x)  # noqa: E731
        elif op == "row_sum":
            fn = lambda x=x: wg.row_sum(x)  # noqa: E731
        else:
            fn = lambda x=x, r=r, w=w: wg.add_rms_norm(x, r, w)  # noqa: E731
        slots = rows * 64

        def fn2(fn=fn, slots=slots):
            torch.zeros(slots, dtype=torch.int64, device="cuda")
            return fn()

        ga, _ = lane.graph(fn)
        gb, _ = lane.graph(fn2)
        gz, _ = lane.graph(lambda slots=slots: torch.zeros(slots, dtype=torch.int64, device="cuda"))
        cold = lane.medians({"A": ga, "B": gb, "Z": gz}, 41)
        warm = warm_medians({"A": ga, "B": gb, "Z": gz}, 41)
        print(f"{op} {rows}x{width}: cold A {cold['A']:.2f} B {cold['B']:.2f} "
              f"(+{cold['B'] - cold['A']:.2f}) zeros-only {cold['Z']:.2f} | warm A {warm['A']:.2f} "
              f"B {warm['B']:.2f} (+{warm['B'] - warm['A']:.2f}) zeros-only {warm['Z']:.2f}",
              flush=True)


if __name__ == "__main__":
    main()
