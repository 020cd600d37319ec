"""MkDocs hook: the table of extras, generated from the library's one declaration of them.

A page that contains ``<!-- extras -->`` gets, in its place, one row per extra: what it
enables (``streaming_exactly_once.extras.EXTRAS``), what it pulls in (its requirements in
setup.cfg) and the disk space it adds, measured on the installed distributions of the
environment that builds the docs: the files of every distribution its requirements reach,
less those the base install already has (for ``spark``, ``arrow`` and ``all``: the bare
package; for the others: ``[spark,arrow]``, the README's install).
"""

from __future__ import annotations

import configparser
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- extras -->"
PROJECT = "streaming-exactly-once"
BASE = ("spark", "arrow")
#: the extras measured against the bare package, not against ``[spark,arrow]``
FROM_BARE = (*BASE, "all")


def requirements(extra: str | None) -> list[Requirement]:
    """The project's own requirements (``extra`` None) or those of one extra, from setup.cfg."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    text = config["options"]["install_requires"] if extra is None else config["options.extras_require"][extra]
    return [Requirement(line.strip()) for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def closure(reqs: list[Requirement]) -> set[str] | None:
    """Every installed distribution ``reqs`` reach (None if one of them is not installed here)."""
    seen: set[str] = set()
    todo = [(r, "") for r in reqs]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            return None
        name = canonicalize_name(dist.metadata["Name"])
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        for line in dist.requires or []:
            sub = Requirement(line)
            wanted = [e for e in req.extras if sub.marker is not None and sub.marker.evaluate({"extra": e})]
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                todo.append((sub, ""))
            elif wanted:
                todo.append((sub, wanted[0]))
    return {k.split("[", 1)[0] for k in seen}


@cache
def installed_bytes(name: str) -> int:
    size = 0
    for file in metadata.distribution(name).files or []:
        path = Path(str(file.locate()))
        if path.is_file():
            size += path.stat().st_size
    return size


def added_size(extra: str) -> str:
    base = requirements(None) + ([] if extra in FROM_BARE else [r for e in BASE for r in requirements(e)])
    have, want = closure(base), closure(base + requirements(extra))
    if have is None or want is None:
        return "-"
    size = sum(installed_bytes(name) for name in want - have)
    return f"{size / 1e6:,.0f} MB" if size >= 1e6 else f"{size / 1e3:,.0f} kB"


def pulls_in(extra: str) -> str:
    """The extra's requirements as setup.cfg states them."""
    return ", ".join(f"`{req}`" for req in requirements(extra))


def extras_table() -> str:
    from streaming_exactly_once.extras import EXTRAS

    lines = ["| extra | enables | pulls in | adds |", "|---|---|---|---|"]
    for extra, enables in EXTRAS.items():
        lines.append(f"| `{extra}` | {enables} | {pulls_in(extra)} | {added_size(extra)} |")
    return "\n".join(lines)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, extras_table())
