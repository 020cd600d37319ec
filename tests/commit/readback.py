"""What readers see of a table after a fencing scenario, judged against what writers reported.

The authority is independent of the library: ``_spark_metadata`` parsed with ``json``
(``tests.torture.verify.manifest_files``, the same parse the Spark torture run trusts) and every
listed file read in full with pyarrow. The set of committed batches is what the writers
themselves reported as committed, plus what the table's commits log records (a batch a
successor rolled forward for a writer that was frozen or killed counts as committed too) -
also parsed with ``json``. Then: every committed row appears exactly once, no other row
appears, and no listed file is missing.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from tests.torture.verify import manifest_files


@dataclass
class Readout:
    """Rows of every file one table's manifest lists."""

    ids: Counter = field(default_factory=Counter)
    files: int = 0
    missing_files: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_table(table: Path) -> Readout:
    out = Readout()
    meta = Path(table) / "_spark_metadata"
    if not meta.is_dir() or not any(not n.startswith(".") for n in os.listdir(meta)):
        return out  # nothing committed yet
    try:
        listed = manifest_files(Path(table))
    except (AssertionError, KeyError, ValueError, OSError) as exc:
        out.problems.append(f"{meta} cannot be read: {type(exc).__name__}: {exc}")
        return out
    for path, size in listed:
        out.files += 1
        if not os.path.exists(path):
            out.missing_files.append(path)
            continue
        if os.path.getsize(path) != size:
            out.problems.append(f"{path}: {os.path.getsize(path)} bytes, the manifest says {size}")
        try:
            out.ids.update(pq.read_table(path, columns=["id"]).column("id").to_pylist())
        except Exception as exc:  # noqa: BLE001 - an unreadable visible file is a finding
            out.problems.append(f"{path}: unreadable: {type(exc).__name__}: {exc}")
    return out


def read_tables(tables: Iterable[Path]) -> Readout:
    total = Readout()
    for table in tables:
        r = read_table(table)
        total.ids.update(r.ids)
        total.files += r.files
        total.missing_files += r.missing_files
        total.problems += r.problems
    return total


def recorded_batches(root: Path) -> set[tuple[str, int]]:
    """(query id, Spark batch id) of every record in ``_seo/commits`` (deltas and compacts)."""
    found: set[tuple[str, int]] = set()
    commits = Path(root) / "_seo" / "commits"
    if not commits.is_dir():
        return found
    for name in os.listdir(commits):
        if name.startswith("."):
            continue
        for line in (commits / name).read_text(encoding="utf-8", errors="replace").split("\n")[1:]:
            if line.startswith("{"):
                try:
                    record = json.loads(line)
                    found.add((record["queryId"], record["sparkBatchId"]))
                except (ValueError, KeyError):
                    continue  # a damaged record surfaces as a loss or an unexpected row
    return found


@dataclass
class Verdict:
    rows: int
    expected: int
    duplicates: dict[int, int]
    losses: list[int]
    unexpected: list[int]
    missing_files: list[str]
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.losses or self.unexpected or self.missing_files or self.problems)

    def describe(self) -> str:
        def few(xs):
            xs = sorted(xs)
            return f"{xs[:12]}{' ...' if len(xs) > 12 else ''} ({len(xs)})"

        parts = [f"{self.rows} rows read, {self.expected} committed"]
        if self.duplicates:
            parts.append(f"ids read more than once: {few(self.duplicates)}")
        if self.losses:
            parts.append(f"committed ids missing: {few(self.losses)}")
        if self.unexpected:
            parts.append(f"ids of no committed batch: {few(self.unexpected)}")
        if self.missing_files:
            parts.append(f"listed files missing: {few(os.path.basename(p) for p in self.missing_files)}")
        if self.problems:
            parts.append(f"problems: {self.problems[:3]}")
        return "; ".join(parts)


def judge(readout: Readout, committed: set[int]) -> Verdict:
    seen = readout.ids
    return Verdict(
        rows=sum(seen.values()),
        expected=len(committed),
        duplicates={i: n for i, n in seen.items() if n > 1},
        losses=sorted(committed - set(seen)),
        unexpected=sorted(set(seen) - committed),
        missing_files=list(readout.missing_files),
        problems=list(readout.problems),
    )


def committed_ids(events: Iterable[dict], recorded: set[tuple[str, int]], rows_of: Callable[[str, int], list[int]]) -> set[int]:
    """Rows of every batch a writer reported committed or the commits log records."""
    ids: set[int] = set()
    for e in events:
        if e.get("event") == "commit" and e.get("status") == "committed":
            ids.update(e["rows"])
    for query, spark_batch in recorded:
        ids.update(rows_of(query, spark_batch))
    return ids


def library_reads(table: Path) -> dict[str, object]:
    """What the library's readers return: a Counter of ids (of file URIs for ``files``), or the
    error text when a reader refuses the table."""
    from streaming_exactly_once import read

    readers = {
        "read.files": lambda: Counter(read.files(str(table))),
        "read.arrow": lambda: Counter(read.arrow(str(table), columns=["id"]).column("id").to_pylist()),
        "read.pandas": lambda: Counter(read.pandas(str(table))["id"].tolist()),
        "read.polars": lambda: Counter(read.polars(str(table))["id"].to_list()),
        "read.duckdb": lambda: Counter(r[0] for r in read.duckdb(str(table)).project("id").fetchall()),
    }
    out: dict[str, object] = {}
    for name, fn in readers.items():
        try:
            out[name] = fn()
        except Exception as exc:  # noqa: BLE001 - the caller asserts on it
            out[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out
