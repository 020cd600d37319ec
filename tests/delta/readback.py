"""What Delta readers see of a table, read without this library's code.

Rows come from delta-rs (``deltalake.DeltaTable(...).to_pyarrow_table()``), which reads the
Delta log and nothing else. The shape of the log - one commit per manifest batch, each with
our application transaction - is read from ``_delta_log/<version>.json`` with ``json``, as any
Delta reader's protocol parser would. ``app_id`` is taken from ``_seo/table`` with ``json`` too.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


def app_id_of(table: Path) -> str:
    lines = (Path(table) / "_seo" / "table").read_text().splitlines()
    return json.loads(lines[1])["delta"]["appId"]


def delta_ids(table: Path | str, *, version: int | None = None, storage_options: dict | None = None) -> Counter:
    from deltalake import DeltaTable

    dt = DeltaTable(str(table), version=version, storage_options=storage_options)
    return Counter(dt.to_pyarrow_table(columns=["id"]).column("id").to_pylist())


@dataclass
class DeltaCommit:
    version: int
    adds: list[str] = field(default_factory=list)
    removes: list[str] = field(default_factory=list)
    txns: list[tuple[str, int]] = field(default_factory=list)
    info: dict = field(default_factory=dict)


def delta_commits(table: Path) -> list[DeltaCommit]:
    """Every ``_delta_log/<version>.json`` still present, parsed, oldest first."""
    log_dir = Path(table) / "_delta_log"
    out = []
    for name in sorted(os.listdir(log_dir)):
        if not (name.endswith(".json") and name[:20].isdigit() and len(name) == 25):
            continue
        commit = DeltaCommit(version=int(name[:20]))
        for line in (log_dir / name).read_text().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                commit.adds.append(action["add"]["path"])
            elif "remove" in action:
                commit.removes.append(action["remove"]["path"])
            elif "txn" in action:
                commit.txns.append((action["txn"]["appId"], action["txn"]["version"]))
            elif "commitInfo" in action:
                commit.info = action["commitInfo"]
        out.append(commit)
    return out


def batch_commits(table: Path) -> dict[int, int]:
    """manifest batch id -> the Delta version whose commit carries it (our txn); asserts that
    each of our commits carries exactly one transaction of our app and that no batch is in two."""
    app = app_id_of(table)
    seen: dict[int, int] = {}
    for commit in delta_commits(table):
        ours = [v for a, v in commit.txns if a == app]
        if not ours:
            continue
        assert len(ours) == 1, f"Delta version {commit.version} carries {len(ours)} transactions of {app}"
        batch = ours[0]
        assert batch not in seen, f"batch {batch} is in Delta versions {seen[batch]} and {commit.version}"
        assert commit.adds, f"Delta version {commit.version} (batch {batch}) adds no file"
        seen[batch] = commit.version
    return seen
