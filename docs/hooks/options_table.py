"""MkDocs hook: the sink options reference, generated from the code's own declaration.

A page that contains ``<!-- options: sink -->`` (or ``<!-- options: group -->``) gets, in its
place, one table row per option: name with its type under it, default and meaning, all from the
options' declaration (``streaming_exactly_once.sink.keywords``). The table sits in a
``seo-options`` block that ``docs/css/site.css`` lays out: names never wrap, types wrap only
between alternatives.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

MARKER = re.compile(r"<!-- options: (sink|group) -->")
#: a code span; pipes inside one are not cell separators for Python-Markdown's tables, and an
#: escape there would be shown as it is
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def readable_type(annotation: Any) -> str:
    """The annotation as a user writes it: ``X | None`` for ``Optional[X]``, ``'a' | 'b'`` for
    ``Literal['a', 'b']``, without module prefixes."""
    text = inspect.formatannotation(annotation)
    for prefix in ("collections.abc.", "typing.", "datetime.", "streaming_exactly_once.sink.outputs.", "streaming_exactly_once.sink.checks."):
        text = text.replace(prefix, "")
    text = re.sub(r"Literal\[([^\]]*)\]", lambda m: " | ".join(v.strip() for v in m.group(1).split(",")), text)
    optional = re.fullmatch(r"Optional\[(.*)\]", text)
    return f"{optional.group(1)} | None" if optional else text


def declared_options(kind: str) -> list[tuple[str, str, str, str]]:
    """``(name, type, default, meaning)`` of every option of the sinks (``sink``) or of
    ``DatasetSink`` alone (``group``), in declaration order (``sink.keywords``)."""
    from streaming_exactly_once.sink.keywords import GroupKeywords, SinkKeywords, declared

    rows = []
    for d in declared(SinkKeywords) if kind == "sink" else declared(GroupKeywords, own=True):
        rows.append((d.name, readable_type(d.annotation), repr(d.option.default), d.option.doc))
    return rows


def _cell(text: str) -> str:
    """``text`` for a table cell: pipes outside code spans escaped, doubled backticks (the
    docstrings' reST) single."""
    text = text.replace("``", "`")
    out, last = [], 0
    for m in CODE_SPAN.finditer(text):
        out.append(text[last : m.start()].replace("|", "\\|"))
        out.append(m.group(0))
        last = m.end()
    out.append(text[last:].replace("|", "\\|"))
    return "".join(out)


def options_table(kind: str) -> str:
    lines = ['<div class="seo-options" markdown>', "", "| option | default | meaning |", "|---|---|---|"]
    for name, annotation, default, meaning in declared_options(kind):
        option = f'`{name}`<br><span class="seo-type">`{annotation}`</span>'
        lines.append(f"| {option} | `{default}` | {_cell(meaning)} |")
    lines += ["", "</div>"]
    return "\n".join(lines)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return MARKER.sub(lambda m: options_table(m.group(1)), markdown)
