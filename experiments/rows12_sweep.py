"""rows12 sweep: the persistent cooperative softmax (``RowPlan.coop(..., programs_per_sm=k)``).

The one-shot cooperative grid (``_softmax_coop``: rows x chunks programs) leaves each program
idle through its row's statistics exchange (publish, poll, merge: L2 round trips), and the
looped plan reads a row twice; at thousands of rows of 131072-151936 both stay at 70-77% of the
copy ceiling (run 20261201-211302-default: 4096x131072 0.81x QuACK). ``_softmax_coop_pf`` keeps a
persistent grid of whole rows' chunks and loads the next row's chunk before the exchange.

This script is rows9_sweep with its own cells and candidates (same timing, compilation, FP64
gate, special rows and summary): the rows9 losing cells and DRAM-bound vocabulary widths, each
timed with the rule's plan, the one-shot coop 4096/4 and persistent variants at several programs
per SM. A persistent plan needs all its programs resident: each one is first launched on two rows,
its compiled kernel's registers give the SM's capacity (registers per SM read from the device),
and a plan asking for more programs per SM than fit is recorded as an error, never launched on
the cell (a row whose programs are not all resident waits out the poll limit).

    PYTHONPATH=src python3 experiments/rows12_sweep.py --out $OUT/rows12.json --budget 240
    ROWS12_ROUND=3 ...  (round 3: register-capped persistent plans at the DRAM-bound cells)
    PYTHONPATH=src TRITON_INTERPRET=1 python3 experiments/rows12_sweep.py --out /tmp/r.json --smoke
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rows5_sweep as r5  # noqa: E402
import rows9_sweep as r9  # noqa: E402

CELLS = [(4096, 131072), (1024, 151936), (8192, 32000), (2048, 131072), (512, 131072),
         (256, 262144), (1335, 50257), (1024, 65537), (2048, 65536), (264, 100003),
         (441, 151936), (1024, 128256), (4096, 32768), (64, 131072), (64, 128256), (128, 50257),
         (100, 65537), (16, 262144)]  # fmt: skip
OCCUPANCY: dict = {}  # repr(plan) -> (registers, programs per SM that fit)


ROUND = int(os.environ.get("ROWS12_ROUND", "2"))
CELLS3 = [(4096, 131072), (1024, 151936), (2048, 131072), (1024, 128256), (512, 131072),
          (1335, 50257), (8192, 32000), (256, 262144), (1024, 65537), (2048, 65536),
          (441, 151936)]  # fmt: skip


def cells_all(sm, smoke=False):
    if smoke:
        return [(7, 1001, "smoke"), (5, 1000, "smoke")]
    return [(r, n, "target") for r, n in (CELLS3 if ROUND == 3 else CELLS)]


def candidates(n, smoke=False):
    from warpgauge.kernels.plans import RowPlan as P

    if smoke:
        return [P.coop(128, 1, fast_exp=True, programs_per_sm=8),
                P.coop(128, 1, programs_per_sm=2)]  # fmt: skip
    if ROUND == 3:  # register caps for more resident programs (round 2: time ~ programs)
        return [P.coop(4096, 4, fast_exp=True, programs_per_sm=6),
                P.coop(4096, 4, fast_exp=True, programs_per_sm=7, maxnreg=72),
                P.coop(4096, 4, fast_exp=True, programs_per_sm=8, maxnreg=64),
                P.coop(4096, 4, fast_exp=True, programs_per_sm=10, maxnreg=48),
                P.coop(8192, 8, fast_exp=True, programs_per_sm=3, maxnreg=80),
                P.coop(8192, 8, fast_exp=True, programs_per_sm=4, maxnreg=64),
                P.coop(2048, 2, fast_exp=True, programs_per_sm=16, maxnreg=64),
                P.coop(2048, 4, fast_exp=True, programs_per_sm=12, maxnreg=40)]  # fmt: skip
    c = [P.coop(4096, 4, fast_exp=True)]
    c += [P.coop(4096, 4, fast_exp=True, programs_per_sm=k) for k in (4, 6, 8, 12)]
    c += [P.coop(4096, 4, fast_exp=True, programs_per_sm=k, stages=2) for k in (3, 4, 5)]
    c += [P.coop(2048, 2, fast_exp=True, programs_per_sm=k, stages=2) for k in (6, 8, 10)]
    c += [P.coop(8192, 8, fast_exp=True, programs_per_sm=k) for k in (2, 3, 4)]
    if n >= 65536:
        c += [P.coop(16384, 16, fast_exp=True, programs_per_sm=k) for k in (1, 2)]
    else:
        c += [P.coop(2048, 4, fast_exp=True, programs_per_sm=k) for k in (8, 16)]
    return c


def capacity(plan, x):
    """(registers, programs per SM that fit) of a persistent plan's kernel, compiled by one
    launch on two rows of ``x`` (two lanes at most: always resident)."""
    import torch
    from torch._library.triton import set_wrap_triton_enabled

    from warpgauge.kernels import _launch
    from warpgauge.kernels import softmax as softmax_k
    from warpgauge.kernels.softmax_coop import _softmax_coop_pf

    _launch._CACHE.pop(_softmax_coop_pf, None)
    with set_wrap_triton_enabled(False):  # as the eager entry calls it: the cached launch path
        softmax_k.softmax(x[:2], plan=plan)
    if r5.DEV != "cuda":
        return 0, 1 << 10
    torch.cuda.synchronize()
    (entry,) = _launch._CACHE[_softmax_coop_pf].values()
    regs = entry.compiled.n_regs
    props = torch.cuda.get_device_properties(0)
    per_sm = getattr(props, "regs_per_multiprocessor", 65536)
    warp_regs = -(-regs * 32 // 256) * 256  # allocated per warp in units of 256
    fit = min((per_sm // warp_regs) // plan.num_warps, 64 // plan.num_warps, 32)
    smem = entry.compiled.metadata.shared
    if smem:
        fit = min(fit, getattr(props, "shared_memory_per_multiprocessor", 233472) // smem)
    return regs, fit


_gate = r5.gate


def gate(op, plan, args):
    if plan != "torch" and plan.kind == "coop" and plan.programs_per_sm:
        key = repr(plan) + f"@{args[0].shape[1]}"
        if key not in OCCUPANCY:
            OCCUPANCY[key] = capacity(plan, args[0])
            print(f"  {key}: {OCCUPANCY[key][0]} registers, {OCCUPANCY[key][1]} per SM fit",
                  flush=True)  # fmt: skip
        regs, fit = OCCUPANCY[key]
        if plan.programs_per_sm > fit:
            raise RuntimeError(f"over occupancy: {plan.programs_per_sm} per SM asked, {fit} fit "
                               f"({regs} registers)")  # fmt: skip
    return _gate(op, plan, args)


def main():
    r9.TARGET = CELLS
    r9.cells_all = cells_all
    r9.candidates = candidates
    r5.gate = gate
    return r9.main()


if __name__ == "__main__":
    sys.exit(main())
