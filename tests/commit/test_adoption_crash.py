"""kill -9 of a writer at the boundaries of the batch that adopts a directory's existing files,
and of the table's first batch after it: readers see the files' rows (as the plain directory
before the adoption's manifest, through it after) and the first batch's rows only once it has
committed, never a file of it before; the next writer rolls forward or adopts anew, and every
row - the existing files' and the stream's - is in the table exactly once."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from streaming_exactly_once import read
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from tests.commit.processes import QA, SCHEMA_JSON, Writer, batch_rows, stop_all

pytestmark = pytest.mark.torture

EXISTING = {"p=old": [1_000_000, 1_000_001], "p=older": [1_000_002]}
OPTIONS = {"lease_timeout_ms": 2000, "partition_by": ["p"], "adopt_existing_files": True}


def _program(name: str, root: Path, steps: list[dict]) -> dict:
    return {"name": name, "root": str(root), "options": OPTIONS, "steps": steps}


def _expected(batches: int) -> Counter:
    return Counter([i for ids in EXISTING.values() for i in ids] + [i for b in range(batches) for i in batch_rows(0, b, 4)])


#: ``make test`` kills after the adoption's claim, and in the first batch before its claim and
#: after its move; the rest in ``make test-long``. ``@2``: the first batch's (the adoption's is ``@1``).
BOUNDED = ("after-wal", "before-wal@2", "after-move")


def _readers_see(root: Path) -> Counter:
    """What a reader of the directory sees now: the manifest's batches, or with none yet every
    file a plain reader reads (vanilla Spark, pyarrow: paths starting with ``_`` or ``.`` skipped)."""
    if (root / "_spark_metadata").exists():
        return Counter(read.arrow(str(root)).column("id").to_pylist())
    return Counter(pq.read_table(root).column("id").to_pylist())


@pytest.mark.parametrize(
    "boundary",
    [
        pytest.param(b, marks=() if b in BOUNDED else pytest.mark.long)
        for b in ("before-wal", "after-wal", "after-manifest", "after-commit", "before-wal@2", "mid-move", "after-move", "after-manifest@2")
    ],
)
def test_a_kill_in_the_adoption_or_the_first_batch_leaves_every_row_once(tmp_path, boundary):
    root = tmp_path / "t"
    for directory, ids in EXISTING.items():
        (root / directory).mkdir(parents=True)
        pd.DataFrame({"id": pd.array(ids, dtype="int64")}).to_parquet(root / directory / "data.parquet")
    commits = {"do": "commits", "query": QA, "count": 1, "rows": 4, "files": 2, "schema": SCHEMA_JSON}
    writers: list[Writer] = []
    try:
        a = Writer(_program("A", root, [{"do": "open"}, {**commits, "crash_at": boundary}, {"do": "hang"}]))
        writers.append(a)
        a.proc.wait(timeout=120)
        assert a.proc.returncode == -signal.SIGKILL, f"A was not killed at {boundary}\n{a.output()}"
        # the existing rows, and the first batch's only once its manifest is there: never a file it moved before
        assert _readers_see(root) == _expected(1 if (root / "_spark_metadata" / "1").exists() else 0)
        b = Writer(_program("B", root, [{"do": "open", "retry_s": 10}, {**commits, "count": 2, "first": 0}, {"do": "close"}]))
        writers.append(b)
        assert b.wait(timeout=120) == 0, b.output()
    finally:
        stop_all(writers)
    assert Counter(read.arrow(str(root)).column("id").to_pylist()) == _expected(2)
    assert Counter(read.arrow(str(root), as_of=0).column("id").to_pylist()) == _expected(0)
    assert Counter(read.arrow(str(root), as_of=1).column("id").to_pylist()) == _expected(1)
    assert verify_table(open_storage(str(root))).problems == []
