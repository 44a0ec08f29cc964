"""A report as a list of blocks, rendered to Markdown and to one self-contained HTML page.

Blocks: ``("h1", text)``, ``("h2", text)``, ``("p", text)``, ``("ul", [text, ...])``,
``("img", path, alt)``, ``("table", headers, rows)``. A table cell is a string or a ``Cell``:
``cls`` "win", "tie" or "loss" colours it in HTML (a loss is also bold in Markdown), and ``full``
folds a long text (a provider's traceback) under a one-line summary (``<details>``; Markdown
shows the summary only). The HTML embeds figures as base64 PNG data URIs: no network, no script.
"""

from __future__ import annotations

import base64
import html
import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Cell:
    text: str
    cls: str | None = None  # "win" | "tie" | "loss" | "num" | None
    full: str | None = None  # folded text shown on demand

    def __str__(self) -> str:
        return self.text


def _text(c) -> str:
    return c.text if isinstance(c, Cell) else str(c)


def _md_cell(c) -> str:
    text = _text(c).replace("|", "\\|").replace("\n", " ")
    return f"**{text}**" if isinstance(c, Cell) and c.cls == "loss" else text


def to_markdown(blocks: list[tuple], base: Path) -> str:
    out = []
    for kind, *rest in blocks:
        if kind == "h1":
            out.append(f"# {rest[0]}\n")
        elif kind == "h2":
            out.append(f"## {rest[0]}\n")
        elif kind == "p":
            out.append(f"{rest[0]}\n")
        elif kind == "ul":
            out.append("\n".join(f"- {item}" for item in rest[0]) + "\n")
        elif kind == "img":
            path, alt = rest
            out.append(f"![{alt}]({Path(os.path.relpath(path, base)).as_posix()})\n")
        elif kind == "table":
            headers, rows = rest
            lines = [
                "| " + " | ".join(_md_cell(h) for h in headers) + " |",
                "|" + "---|" * len(headers),
            ]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            out.append("\n".join(lines) + "\n")
    return "\n".join(out)


CSS = """
body { font-family: system-ui, sans-serif; max-width: 1360px; margin: 1.5em auto; padding: 0 1em;
       color: #222; line-height: 1.4; }
.wrap { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 0.5em 0 1.3em; font-size: 0.82em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.35em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; font-weight: 600; max-width: 11em; overflow-wrap: break-word; }
td { white-space: nowrap; }
td.text { white-space: normal; overflow-wrap: anywhere; min-width: 12em; }
td.wrap { white-space: normal; min-width: 4.5em; }
td.win { background: #e6f4e6; }
td.tie { background: #f4f4f4; color: #555; }
td.loss { background: #fbe3e3; color: #8b0000; font-weight: 600; }
details summary { cursor: pointer; }
details pre { white-space: pre-wrap; font-size: 0.9em; background: #fafafa; padding: 0.4em;
              max-width: 60em; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.6em; }
.legend span { padding: 0 0.5em; margin-right: 0.6em; }
"""


_BREAK_AFTER = re.compile(r"([._/,-])(?=\S)")
_BREAK_BEFORE = re.compile(r"(?<=\S)\(")


def _th(h) -> str:
    """A header cell that may break at punctuation, so long provider labels wrap."""
    text = _BREAK_AFTER.sub(r"\1<wbr>", html.escape(_text(h)))
    return "<th>" + _BREAK_BEFORE.sub("<wbr>(", text) + "</th>"


def _nobreak_ranges(text: str) -> str:
    """Keep "14.3–15.5" together: word joiners around the en dash, so a cell wraps at a space."""
    return text.replace("–", "\u2060–\u2060")


def _td(c) -> str:
    def e(t):
        return html.escape(_nobreak_ranges(t))

    if not isinstance(c, Cell):
        return f"<td>{e(str(c))}</td>"
    cls = f' class="{c.cls}"' if c.cls else ""
    if c.full and c.full != c.text:
        body = f"<details><summary>{e(c.text)}</summary><pre>{e(c.full)}</pre></details>"
        return f'<td class="text">{body}</td>'
    return f"<td{cls}>{e(c.text)}</td>"


def to_html(blocks: list[tuple]) -> str:
    e = html.escape
    title = next((rest[0] for kind, *rest in blocks if kind == "h1"), "warpgauge report")
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)}</title><style>{CSS}</style></head><body>",
    ]
    for kind, *rest in blocks:
        if kind in ("h1", "h2", "p"):
            out.append(f"<{kind}>{e(str(rest[0]))}</{kind}>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{e(str(i))}</li>" for i in rest[0]) + "</ul>")
        elif kind == "img":
            path, alt = rest
            data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
            out.append(f'<p><img alt="{e(alt)}" src="data:image/png;base64,{data}"></p>')
        elif kind == "table":
            headers, rows = rest
            head = "" if not any(headers) else "<tr>" + "".join(_th(h) for h in headers) + "</tr>"
            body = "".join("<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in rows)
            out.append(f'<div class="wrap"><table>{head}{body}</table></div>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"
