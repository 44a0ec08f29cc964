"""``warpgauge host-report RUN``: host microseconds per eager call of a host-mode run.

Per case: every provider's ``host_time`` (median, p10-p90) and its graph-replay device time,
then warpgauge's host cost over the cheapest PyTorch equivalent's (plain call, and with inputs
requiring grad: the ``_grad`` providers). Reads the artifacts only.
"""

from __future__ import annotations

from pathlib import Path


def _h(p) -> str:
    h = p.get("host_time")
    if not h:
        return "-"
    return f"{h['median_us']:.1f} ({h['p10_us']:.1f}-{h['p90_us']:.1f})"


def _best(provs, grad: bool):
    cands = [p for p in provs if p["family"] in ("pytorch", "compile") and p.get("host_time")
             and p["name"].endswith("_grad") == grad]  # fmt: skip
    return min(cands, key=lambda p: p["host_time"]["median_us"], default=None)


def markdown(run_dir) -> str:
    from warpgauge import artifacts

    run = artifacts.load_run(run_dir)
    lines = [f"# Host cost per eager call (run `{Path(run_dir).name}`)", "",
             "Host microseconds per call: median (p10-p90) of host-bound loops of "
             f"{run.run['config']['sampling'].get('host_calls', '?')} calls; device time is graph "
             "replay, for scale.", "",
             "| case | call | warpgauge host us | cheapest PyTorch | its host us | ratio | "
             "device us (warpgauge) |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    detail = ["", "## Every provider", "", "| case | provider | status | host us | device us |",
              "|---|---|---|---|---|"]  # fmt: skip
    for case in run.cases:
        if not isinstance(case, dict):
            continue
        provs = [p for p in case["providers"] if p["status"] != "absent"]
        by = {p["name"]: p for p in provs}
        for grad, wg_name, what in ((False, "warpgauge", "eager"),
                                    (True, "warpgauge_grad", "inputs require grad")):  # fmt: skip
            wg, best = by.get(wg_name), _best(provs, grad)
            if wg is None or not wg.get("host_time"):
                continue
            ratio = (f"{wg['host_time']['median_us'] / best['host_time']['median_us']:.2f}x"
                     if best else "-")  # fmt: skip
            dev = wg["device_time"]["median_us"] if wg.get("device_time") else None
            lines.append(f"| {case['case_id']} | {what} | {_h(wg)} | {best['name'] if best else '-'}"
                         f" | {_h(best) if best else '-'} | {ratio} | "
                         f"{'-' if dev is None else f'{dev:.2f}'} |")  # fmt: skip
        for p in provs:
            dev = p["device_time"]["median_us"] if p.get("device_time") else None
            detail.append(f"| {case['case_id']} | {p['name']} | {p['status']} | {_h(p)} | "
                          f"{'-' if dev is None else f'{dev:.2f}'} |")  # fmt: skip
    return "\n".join(lines + detail) + "\n"


def report_cli(run, write=None) -> int:
    import sys

    try:
        text = markdown(run)
    except (OSError, ValueError, KeyError) as e:
        print(f"warpgauge host-report: cannot read {run}: {e}", file=sys.stderr)
        return 1
    if write:
        from warpgauge.artifacts import atomic_write_bytes

        atomic_write_bytes(Path(write), text.encode())
    print(text)
    return 0
