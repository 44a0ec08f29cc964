"""What a person sees during ``warpgauge bench``: progress with an ETA, one line per finished
operator, and a summary table (warpgauge vs the best PyTorch provider per case)."""

from __future__ import annotations

import sys
import time


def _fmt(v, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


class RichUI:
    def __init__(self, console=None):
        from rich.console import Console

        if console is None:
            console = Console(highlight=False)
            if not console.is_terminal:
                console = Console(highlight=False, width=140)
        self.console = console
        self.progress = None
        self.task = None
        self.n = 0
        self.total = 0
        self.t0 = None

    def info(self, msg: str) -> None:
        target = self.progress.console if self.progress is not None else self.console
        target.print(msg, markup=False, highlight=False)

    def start(self, total: int, description: str) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[last]}"),
            console=self.console,
            disable=not self.console.is_terminal,
        )
        self.progress.start()
        self.task = self.progress.add_task(description, total=total, last="")
        self.n, self.total = 0, total
        self.t0 = time.perf_counter()

    def case_done(self, case_id: str, row: dict) -> None:
        self.n += 1
        if self.progress is None:
            return
        self.progress.update(self.task, advance=1, last=case_id)
        if not self.console.is_terminal:  # a log, not a live bar: one line per case
            elapsed = time.perf_counter() - self.t0
            eta = elapsed / self.n * (self.total - self.n)
            wg = _fmt(row["wg_us"], ".2f") if row["wg_status"] == "ok" else row["wg_status"]
            speed = "" if row["speedup"] is None else f" {row['speedup']:.2f}x"
            self.info(
                f"[{self.n}/{self.total} {elapsed:.0f}s eta {eta:.0f}s] {case_id}: warpgauge {wg} us"
                f" | best {row['best_name'] or '-'} {_fmt(row['best_us'], '.2f')} us{speed}"
            )

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def summary(self, rows: list[dict], copy_tbps: float | None) -> None:
        from rich.table import Table

        title = "warpgauge vs the best PyTorch provider (device time, median)"
        if copy_tbps:
            title += f"; copy ceiling {copy_tbps:.2f} TB/s"
        t = Table(title=title, show_lines=False, pad_edge=False)
        for col, justify in (("case", "left"), ("warpgauge us", "right"), ("best PyTorch", "left"),
                             ("us", "right"), ("speedup", "right"), ("TB/s", "right"),
                             ("% copy", "right")):  # fmt: skip
            t.add_column(col, justify=justify, no_wrap=True)
        for r in rows:
            wg = _fmt(r["wg_us"], ".2f") if r["wg_status"] == "ok" else r["wg_status"]
            t.add_row(
                f"{r['op']}/{r['dtype']}/{r['shape']}/{r['lane']}",
                wg,
                r["best_name"] or "-",
                _fmt(r["best_us"], ".2f"),
                _fmt(r["speedup"], ".2f", "-") + ("x" if r["speedup"] is not None else ""),
                _fmt(r["tbps"], ".2f"),
                _fmt(r["pct_copy"], ".0f"),
            )
        self.console.print(t)


class PlainUI:
    """Line-by-line output without rich (fallback)."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.n = 0
        self.total = 0

    def info(self, msg: str) -> None:
        print(msg, file=self.stream, flush=True)

    def start(self, total: int, description: str) -> None:
        self.total = total
        self.info(f"{description}: {total} case(s)")

    def case_done(self, case_id: str, row: dict) -> None:
        self.n += 1

    def stop(self) -> None:
        pass

    def summary(self, rows: list[dict], copy_tbps: float | None) -> None:
        for r in rows:
            self.info(
                f"{r['op']}/{r['dtype']}/{r['shape']}/{r['lane']}: warpgauge "
                f"{_fmt(r['wg_us'], '.2f')} us, best {r['best_name']} {_fmt(r['best_us'], '.2f')} us, "
                f"speedup {_fmt(r['speedup'], '.2f')}, {_fmt(r['tbps'], '.2f')} TB/s"
            )


def summary_row(case: dict, copy_tbps: float | None) -> dict:
    """One line of the end-of-run table: warpgauge vs the best PyTorch provider."""
    wg = next((p for p in case["providers"] if p["family"] == "warpgauge"), None)
    from warpgauge.artifacts import best_pytorch

    best = best_pytorch(case)
    wg_ok = wg is not None and wg["status"] == "ok"
    return {
        "case_id": case["case_id"],
        "op": case["op"],
        "dtype": case["dtype"],
        "shape": case["shape_label"],
        "lane": case["lane"],
        "wg_status": wg["status"] if wg else "absent",
        "wg_us": wg["device_time"]["median_us"] if wg_ok else None,
        "best_name": best["name"] if best else None,
        "best_us": best["device_time"]["median_us"] if best else None,
        "speedup": wg["derived"]["speedup_vs_best_pytorch"] if wg_ok else None,
        "tbps": wg["derived"]["tbps"] if wg_ok else None,
        "pct_copy": wg["derived"]["pct_copy_ceiling"] if wg_ok else None,
    }
