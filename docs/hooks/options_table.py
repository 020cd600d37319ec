"""MkDocs hook: the sink options reference, generated from the code's own declaration.

A page that contains ``<!-- options: sink -->`` (or ``<!-- options: group -->``) gets, in its
place, one table row per option: name, type, default and meaning, all from the options'
declaration (``streaming_exactly_once.sink.keywords``).
"""

from __future__ import annotations

import inspect
import re
from typing import Any

MARKER = re.compile(r"<!-- options: (sink|group) -->")


def declared_options(kind: str) -> list[tuple[str, str, str, str]]:
    """``(name, type, default, meaning)`` of every option of the sinks (``sink``) or of
    ``DatasetSink`` alone (``group``), in declaration order (``sink.keywords``)."""
    from streaming_exactly_once.sink.keywords import GroupKeywords, SinkKeywords, declared

    rows = []
    for d in declared(SinkKeywords) if kind == "sink" else declared(GroupKeywords, own=True):
        annotation = inspect.formatannotation(d.annotation).replace("collections.abc.", "").replace("typing.", "")
        rows.append((d.name, annotation, repr(d.option.default), d.option.doc))
    return rows


def _cell(text: str) -> str:
    text = text.replace("|", "\\|").replace("``", "`")
    return text


def options_table(kind: str) -> str:
    lines = ["| option | type | default | meaning |", "|---|---|---|---|"]
    for name, annotation, default, meaning in declared_options(kind):
        lines.append(f"| `{name}` | `{_cell(annotation)}` | `{_cell(default)}` | {_cell(meaning)} |")
    return "\n".join(lines)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return MARKER.sub(lambda m: options_table(m.group(1)), markdown)
