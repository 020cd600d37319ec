"""MkDocs hook: the sink options reference, generated from the code's own declaration.

A page that contains ``<!-- options: sink -->`` (or ``<!-- options: group -->``) gets, in its
place, one table row per option: name, type, default and meaning. Names, types and defaults come
from the signature of the function that builds the options (``SinkOptions.build``,
``GroupOptions.build``); meanings from the ``Args:`` section of the sink's docstring. When the
declaration moves, only ``declared_options`` changes.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

MARKER = re.compile(r"<!-- options: (sink|group) -->")


def _meanings(docstring: str) -> dict[str, str]:
    """``Args:`` entries of a Google-style docstring; ``a, b: text`` gives both names the text."""
    meanings: dict[str, str] = {}
    names: list[str] = []
    in_args = False
    for line in inspect.cleandoc(docstring).splitlines():
        if line.strip() == "Args:":
            in_args = True
            continue
        if not in_args:
            continue
        if line and not line.startswith(" "):
            break
        entry = re.match(r"^ {4}([a-z_, ]+):\s*(.*)$", line)
        if entry:
            names = [n.strip() for n in entry.group(1).split(",")]
            for name in names:
                meanings[name] = entry.group(2).strip()
        elif line.strip() and names:
            for name in names:
                meanings[name] += " " + line.strip()
    return meanings


def declared_options(kind: str) -> list[tuple[str, str, str, str]]:
    """``(name, type, default, meaning)`` of every option of the sinks (``sink``) or of
    ``DatasetSink`` alone (``group``), in declaration order."""
    from streaming_exactly_once.sink.dataset_sink import DatasetSink
    from streaming_exactly_once.sink.exactly_once_sink import ExactlyOnceSink
    from streaming_exactly_once.sink.options import GroupOptions, SinkOptions

    build: Callable[..., Any] = SinkOptions.build if kind == "sink" else GroupOptions.build
    meanings = _meanings((ExactlyOnceSink if kind == "sink" else DatasetSink).__doc__ or "")
    rows = []
    for name, param in inspect.signature(build).parameters.items():
        if param.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        annotation = param.annotation if isinstance(param.annotation, str) else inspect.formatannotation(param.annotation)
        default = "required" if param.default is inspect.Parameter.empty else repr(param.default)
        rows.append((name, annotation, default, meanings.get(name, "")))
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
