"""The report's tables, from a loaded run: the per-operator verdict at the top, speedups, host
times and the providers that were not timed. Cells are ``htmldoc.Cell`` where they carry a win,
tie or loss (coloured in HTML) or a folded error text.

A ratio is other / warpgauge device-time median (> 1: warpgauge is faster). It is a tie (†)
when the two p10-p90 intervals overlap, a win or a loss otherwise.
"""

from __future__ import annotations

import math
from collections import defaultdict

from .artifacts import Run, best_pytorch
from .htmldoc import Cell
from .plots import LANE, headline, is_flop_bound, ok, providers_of, suite_order

STATUS_TEXT = {"absent": "absent", "failed_gate": "failed gate", "error": "error"}
OVERLAP_MARK = "†"
LANE_ORDER = ("cold", "warm")
ERROR_SUMMARY_CHARS = 110


def fmt_us(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def fmt_rate(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.0f}" if x >= 100 else f"{x:.2f}"


def _overlap(a: dict, b: dict) -> bool:
    return a["p10_us"] <= b["p90_us"] and b["p10_us"] <= a["p90_us"]


def amount(case: dict) -> int:
    return case["work"]["flops"] if is_flop_bound(case["op"]) else case["work"]["bytes"]


def rate(case: dict, us: float) -> float | None:
    """TB/s or TFLOP/s for a time in microseconds (amount / us / 1e6)."""
    a = amount(case)
    return a / us / 1e6 if a > 0 and us > 0 else None


def ceiling(run: Run, op: str, dtype: str, case: dict | None = None) -> float | None:
    """The ceiling of ``op``: the run's, or (``case`` given, multi-GPU run) that of its GPU."""
    own = ((case or {}).get("extra") or {}).get("rank") or {}
    ceil = own.get("ceilings") or run.run.get("ceilings", {})
    if is_flop_bound(op):
        return (ceil.get("mm_tflops") or {}).get(dtype)
    return ceil.get("copy_tbps")


def outcome(other: dict, mine: dict) -> tuple[float, str]:
    """(other / mine ratio, "win" | "tie" | "loss") for two device-time stats."""
    r = other["median_us"] / mine["median_us"]
    if _overlap(other, mine):
        return r, "tie"
    return r, "win" if r > 1 else "loss"


def ratio_cell(other: dict | None, mine: dict, suffix: str = "") -> Cell | str:
    if other is None:
        return "—"
    if not ok(other):
        return Cell(STATUS_TEXT.get(other["status"], other["status"]), "wrap")
    r, cls = outcome(other["device_time"], mine)
    return Cell(f"{r:.2f}×" + (OVERLAP_MARK if cls == "tie" else "") + suffix, cls)


def table_lane(cases: list[dict]) -> str | None:
    lanes = {c["lane"] for c in cases}
    return next((lane for lane in LANE_ORDER if lane in lanes), None)


def _lane_cases(run: Run, op: str) -> tuple[list[dict], str | None]:
    lane = table_lane([c for c in run.cases if c["op"] == op])
    return (suite_order(run, op, lane) if lane else []), lane


# ------------------------------------------------------------------------------------ verdict


def op_verdicts(run: Run, op: str) -> dict | None:
    """Per operator on the cold lane: warpgauge against the best PyTorch provider (geometric
    mean of the ratios, wins / ties / losses, the worst case) and each peer's geometric mean.
    None when warpgauge has no timed case."""
    cases = suite_order(run, op, LANE)
    wg = headline(cases)
    if wg is None:
        return None
    ratios, counts, worst = [], {"win": 0, "tie": 0, "loss": 0}, None
    peers: dict[str, list[float]] = defaultdict(list)
    labels = {n: lab for n, lab, _ in providers_of(cases)}
    for c in cases:
        prs = {p["name"]: p for p in c["providers"]}
        me = prs.get(wg)
        if not ok(me):
            continue
        best = best_pytorch(c)
        if best is not None:
            r, cls = outcome(best["device_time"], me["device_time"])
            ratios.append(r)
            counts[cls] += 1
            if worst is None or r < worst[0]:
                worst = (r, f"{c['dtype']} {c['shape_label']}", best["label"])
        for name, pr in prs.items():
            if pr["family"] == "peer" and ok(pr):
                peers[labels[name]].append(
                    pr["device_time"]["median_us"] / me["device_time"]["median_us"]
                )
    if not ratios and not peers:
        return None

    def gm(xs):
        return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None

    return {
        "op": op,
        "cases": len(ratios),
        "geomean": gm(ratios),
        "counts": counts,
        "worst": worst,
        "peers": {label: (gm(xs), len(xs)) for label, xs in peers.items()},
    }


def verdict_table(run: Run, ops: list[str]) -> tuple[list[str], list[list]]:
    """The first table of the report: one row per operator (see ``op_verdicts``)."""
    headers = ["operator", "cases", "vs best PyTorch (geomean)", "wins / ties / losses",
               "worst case vs best PyTorch", "vs peers (geomean, cases)"]  # fmt: skip
    rows = []
    for op in ops:
        v = op_verdicts(run, op)
        if v is None:
            rows.append([op, "0", "—", "—", "—", "—"])
            continue
        g = v["geomean"]
        c = v["counts"]
        worst = v["worst"]
        peers = "; ".join(
            f"{label} {m:.2f}× ({n})" for label, (m, n) in v["peers"].items() if m is not None
        )
        rows.append(
            [
                op,
                str(v["cases"]),
                Cell(f"{g:.2f}×", "win" if g > 1 else "loss") if g else "—",
                f"{c['win']} / {c['tie']} / {c['loss']}",
                Cell(
                    f"{worst[0]:.2f}× at {worst[1]} ({worst[2]})", "loss" if worst[0] < 1 else None
                )
                if worst
                else "—",
                peers or "—",
            ]
        )
    return headers, rows


# ------------------------------------------------------------------------------------ per operator


def speedup_table(run: Run, op: str) -> tuple[list[str], list[list], str | None]:
    """Headers and rows: warpgauge against the best PyTorch provider and each other provider,
    per dtype and shape in suite order, on the cold lane (warm when there is no cold lane).
    Returns (headers, rows, lane)."""
    cases, lane = _lane_cases(run, op)
    wg = headline(cases)
    if wg is None:
        return [], [], lane
    others = [p for p in providers_of(cases) if p[0] != wg]
    flops = is_flop_bound(op)
    headers = [
        "dtype",
        "shape",
        f"{wg} median µs (p10–p90)",
        "TFLOP/s" if flops else "TB/s",
        "% of mm ceiling" if flops else "% of copy ceiling",
        "vs best PyTorch",
        "best PyTorch provider",
    ]
    headers += [f"vs {label}" for _, label, _ in others]
    rows = []
    for c in cases:
        prs = {p["name"]: p for p in c["providers"]}
        me = prs.get(wg)
        row: list = [c["dtype"], c["shape_label"]]
        if not ok(me):
            status = STATUS_TEXT.get(me["status"], me["status"]) if me else "not run"
            rows.append(row + [Cell(status, "loss")] + ["—"] * (len(headers) - 3))
            continue
        dt = me["device_time"]
        rt = rate(c, dt["median_us"])
        ceil = ceiling(run, op, c["dtype"], c)
        row += [
            Cell(
                f"{fmt_us(dt['median_us'])} ({fmt_us(dt['p10_us'])}–{fmt_us(dt['p90_us'])})", "wrap"
            ),
            fmt_rate(rt),
            f"{100 * rt / ceil:.0f}%" if rt and ceil else "—",
        ]
        best = best_pytorch(c)
        row.append(ratio_cell(best, dt))
        row.append(Cell(best["label"], "wrap") if best else "—")
        row += [ratio_cell(prs.get(name), dt) for name, _, _ in others]
        rows.append(row)
    return headers, rows, lane


def warm_table(run: Run, op: str) -> tuple[list[str], list[list]]:
    """The warm lane (inputs left in L2: a cache diagnostic), compactly: warpgauge's median and
    rate, and its ratio to the best PyTorch provider, per dtype and shape. Empty without a
    warm lane or when it is the only lane (then ``speedup_table`` shows it)."""
    lanes = {c["lane"] for c in run.cases if c["op"] == op}
    if "warm" not in lanes or lanes == {"warm"}:
        return [], []
    cases = suite_order(run, op, "warm")
    wg = headline(cases)
    if wg is None:
        return [], []
    unit = "TFLOP/s" if is_flop_bound(op) else "TB/s"
    headers = [
        "dtype",
        "shape",
        f"{wg} median µs",
        unit,
        "vs best PyTorch",
        "best PyTorch provider",
    ]
    rows = []
    for c in cases:
        me = next((p for p in c["providers"] if p["name"] == wg), None)
        if not ok(me):
            rows.append([c["dtype"], c["shape_label"], "not timed", "—", "—", "—"])
            continue
        dt = me["device_time"]
        best = best_pytorch(c)
        rows.append(
            [
                c["dtype"],
                c["shape_label"],
                fmt_us(dt["median_us"]),
                fmt_rate(rate(c, dt["median_us"])),
                ratio_cell(best, dt),
                Cell(best["label"], "wrap") if best else "—",
            ]  # fmt: skip
        )
    return headers, rows


def host_table(run: Run, op: str) -> tuple[list[str], list[list[str]], str | None]:
    """Host + device time per call (median µs of per-call events) for every provider."""
    cases, lane = _lane_cases(run, op)
    provs = providers_of(cases)
    headers = ["dtype", "shape"] + [label for _, label, _ in provs]
    rows = []
    for c in cases:
        prs = {p["name"]: p for p in c["providers"]}
        row = [c["dtype"], c["shape_label"]]
        for name, _, _ in provs:
            pr = prs.get(name)
            if pr is None:
                row.append("—")
            elif pr["status"] != "ok":
                row.append(STATUS_TEXT.get(pr["status"], pr["status"]))
            else:
                ht = pr.get("host_time")
                row.append(fmt_us(ht["median_us"]) if ht else "not measured")
        rows.append(row)
    return headers, rows, lane


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return "—"
    # a traceback's last line says what happened; otherwise the first line does
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    more = len(lines) > 1 or len(line) > ERROR_SUMMARY_CHARS
    return line[:ERROR_SUMMARY_CHARS] + ("…" if more else "")


def issues_table(run: Run) -> tuple[list[str], list[list]]:
    """Providers that were absent, failed the gate or raised: one row per (op, provider, status,
    reason) with the cases it covers; the reason is one line, the full text folded away."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for c in run.cases:
        for pr in c["providers"]:
            if pr["status"] != "ok":
                groups[(c["op"], pr["name"], pr["status"], pr.get("error") or "")].append(
                    {"case": c, "pr": pr}
                )
    rows = []
    for (op, name, status, reason), items in sorted(groups.items()):
        where = [
            f"{i['case']['dtype']} {i['case']['shape_label']} {i['case']['lane']}" for i in items
        ]
        cases = ", ".join(where) if len(where) <= 4 else f"{len(where)} cases"
        full = reason or "—"
        if status == "failed_gate":
            gates = [i["pr"]["gate"] for i in items if i["pr"].get("gate")]
            if gates:
                g = max(gates, key=lambda g: g["n_bad"])
                full += (
                    f" (worst: {g['n_bad']} bad, {g['n_nan']} NaN, max abs err {g['max_abs_err']})"
                )
        summary = _one_line(full)
        rows.append([op, name, STATUS_TEXT.get(status, status), cases, Cell(summary, "text", full)])
    return ["operator", "provider", "status", "cases", "reason"], rows
