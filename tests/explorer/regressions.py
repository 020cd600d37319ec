"""Saved reproducers: shrunk programs of findings, replayed by ``test_regressions``.

A file holds the finding's id and title, whether it is still ``open`` (the library's fix has not
landed: the test expects the failure), the program's listing (for people) and the program
itself (one line per action).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.explorer.program import Program

DIRECTORY = Path(__file__).resolve().parent / "regressions"


def save(path: Path, program: Program, *, finding: str, title: str, failure: str = "", open_: bool = True) -> None:
    head = {"finding": finding, "title": title, "open": open_, "failure": failure, "listing": program.listing().splitlines()}
    lines = [f' "{k}": {json.dumps(v)},' for k, v in head.items()]
    path.write_text("{\n" + "\n".join(lines) + f'\n "program": {program.dumps()}\n}}\n')


def load(path: Path) -> tuple[dict[str, Any], Program]:
    data = json.loads(path.read_text())
    return data, Program.from_json(data["program"])


def saved() -> list[Path]:
    return sorted(DIRECTORY.glob("*.json"))
