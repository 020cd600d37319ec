"""How the CLI prints: aligned tables and key/value blocks for people, one JSON document for tools."""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def human_time(ms: int | None) -> str:
    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _cell(value: Any, *, exact: bool = False) -> str:
    """A table cell: ``exact`` shows data as it is (a float's shortest exact repr, ``None`` as
    ``null``); otherwise figures of a report, floats to one decimal."""
    if value is None:
        return "null" if exact else "-"
    if isinstance(value, float):
        return repr(value) if exact else f"{value:.1f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


class Printer:
    """Where a command prints: people get tables and blocks, `--json` one document."""

    def __init__(self, as_json: bool, stream: TextIO | None = None) -> None:
        self.as_json = as_json
        self.stream = stream or sys.stdout

    def write(self, text: str = "") -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def json(self, obj: Any) -> None:
        self.write(json.dumps(obj, indent=1, default=str, ensure_ascii=False))

    def table(self, rows: Iterable[Sequence[Any]], headers: Sequence[str], *, exact: bool = False) -> None:
        """Aligned columns; ``exact``: the cells are data (``seo read``), shown without rounding."""
        cells = [[_cell(v, exact=exact) for v in row] for row in rows]
        widths = [len(h) for h in headers]
        for row in cells:
            widths = [max(w, len(c)) for w, c in zip(widths, row, strict=False)]
        self.write("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=False)).rstrip())
        self.write("  ".join("-" * w for w in widths))
        for row in cells:
            self.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())

    def block(self, pairs: Sequence[tuple[str, Any]]) -> None:
        width = max((len(k) for k, _ in pairs), default=0)
        for key, value in pairs:
            self.write(f"{key.ljust(width)}  {_cell(value)}")
