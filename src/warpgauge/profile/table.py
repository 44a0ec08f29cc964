"""A Markdown table of a profile record: what docs/profiling.md quotes and a report can embed."""

from __future__ import annotations

from pathlib import Path


def _f(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def markdown(record: dict) -> str:
    """One row per target: kernels, DRAM bytes measured vs model, gaps, DRAM/L2 % of peak,
    occupancy, registers, SM clock and the leading stall of its longest kernel, and the flag."""
    head = ("| target | plan | kernels | DRAM read MB (model) | read gap | write gap | DRAM % | "
            "L2 % | occupancy % | regs | SM GHz | leading stall | flag |")  # fmt: skip
    lines = [head, "|" + "---|" * 13]
    for t in record["targets"]:
        if t["status"] != "ok":
            lines.append(f"| {t['name']} | | | {t['status']}: {t['error'] or ''} |" + " |" * 9)
            continue
        k = max(t["kernels"], key=lambda k: k["metrics"].get("duration_ns") or 0)
        m = k["metrics"]
        plan = t.get("plan") or {}
        plan_s = "/".join(str(plan[x]) for x in ("kind", "path", "split", "split_k") if x in plan)
        st = k["stalls"][0] if k["stalls"] else None
        flag = "GAP" if t["flag"]["over_threshold"] else ("note" if t["flag"]["note"] else "")
        mr, gr = t["measured_bytes"]["read"], t["gap_pct"]
        lines.append(
            f"| {t['name']} | {plan_s} | {len(t['kernels'])} | {_f(mr and mr / 1e6, '.2f')} "
            f"({t['model_bytes']['read'] / 1e6:.2f}) | {_f(gr['read'], '+.2f')}% | "
            f"{_f(gr['write'], '+.2f')}% | {_f(m.get('dram_throughput_pct'), '.1f')} | "
            f"{_f(m.get('l2_throughput_pct'), '.1f')} | {_f(m.get('achieved_occupancy_pct'), '.1f')} | "
            f"{_f(m.get('registers_per_thread'), '.0f')} | "
            f"{_f(m.get('sm_clock_hz') and m['sm_clock_hz'] / 1e9, '.2f')} | "
            f"{st['reason'] + ' ' + format(st['share_pct'], '.0f') + '%' if st else '-'} | {flag} |"
        )
    return "\n".join(lines) + "\n"


def markdown_for(profile_dir: str | Path) -> str:
    from warpgauge import artifacts

    return markdown(artifacts.read_json(Path(profile_dir) / "profile.json"))
