"""kill -9 at every boundary of a compaction batch that rewrites small files: the rewrite and the
batch appear together or not at all - to readers at the instant of the kill and after the next
writer's recovery - and no row is ever read twice or lost.

A real writer process commits batches 0 and 1 (two Parquet files each), rewrites those four files
into one in the background, and commits compaction batch 2, which publishes the rewrite; it
SIGKILLs itself at the boundary (``after-rewrite``: in the background, before batch 2); a reader looks at
the table as it was left; a second process recovers it, Spark "re-delivers" batch 2, and every
reader, ``as_of`` each batch, and ``seo verify`` check the result.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from tests.commit.power_cut_runs import seo
from tests.commit.processes import QA, SCHEMA_JSON, Writer, batch_rows, stop_all
from tests.delta.readback import delta_ids
from tests.iceberg.table_helpers import current_metadata, pyiceberg_ids
from tests.torture.matrix_combos import BY_NAME, COMPACTION

pytestmark = pytest.mark.torture

OPTIONS = {"lease_timeout_ms": 2000, "compact_interval": 3, "compaction": COMPACTION}
#: ``make test`` kills at the rewrite's own points and the claim's first steps; the rest in ``make test-long``
BOUNDED = {"after-rewrite", "after-wal", "mid-move", "after-retired", "after-manifest", "after-delta"}
#: where the matrix's compacted direct table is killed, but the points before the rewrite exists,
#: a schema change (none here), after the batch is done, and the janitor's sync of delta records
#: (a compaction batch writes compact records, which that boundary does not name)
DIRECT = [
    b
    for b in BY_NAME["table-plain-spark-direct-local-compacted"].boundaries
    if b not in ("before-stage", "after-stage", "after-intent", "after-schema", "after-wal-delete", "after-records-sync")
]
#: an Iceberg table's compaction batch: its append and its replace snapshot, one metadata version
ICEBERG = ("after-rewrite", "after-manifest", "before-iceberg", "before-iceberg-publish", "mid-iceberg", "after-iceberg")
CASES = [
    pytest.param(kind, b, marks=() if b in BOUNDED or (kind, b) == ("iceberg", "mid-iceberg") else pytest.mark.long, id=f"{kind}-{b}")
    for kind, b in [
        *(("direct", b) for b in DIRECT),
        *(("delta", b) for b in ("after-rewrite", "mid-move", "after-retired", "after-manifest", "after-delta")),
        *(("iceberg", b) for b in ICEBERG),
    ]
]


def _program(name: str, root: Path, kind: str, steps: list[dict]) -> dict:
    delta = kind == "delta"
    return {
        "name": name,
        "root": str(root),
        "options": OPTIONS,
        "delta": {"checkpoint_interval": 10} if delta else None,
        "iceberg": {} if kind == "iceberg" else None,
        "steps": steps,
    }


def _ids(upto: int) -> Counter:
    return Counter(i for b in range(upto + 1) for i in batch_rows(0, b, 5))


def _live(root: Path) -> list[str]:
    return [e.uri.rsplit("/", 1)[-1] for e in ManifestLog(open_storage(str(root))).files()]


def _steps_to(boundary: str, mode: str, schema: dict) -> list[dict]:
    """Batches 0 and 1, then compaction batch 2, killed at ``boundary``. The rewrite is written in
    the background once batch 1 has committed: ``after-rewrite`` is armed before that."""
    one = {"do": "commits", "query": QA, "count": 1, "mode": mode, "drain": True, **schema}
    if boundary == "after-rewrite":
        return [{"do": "open"}, one, {"do": "arm", "crash_at": boundary}, one, one, {"do": "hang"}]
    return [{"do": "open"}, {**one, "count": 2}, {**one, "crash_at": boundary}, {"do": "hang"}]


@pytest.mark.parametrize("kind,boundary", CASES)
def test_a_rewrite_and_its_batch_appear_together_after_a_kill(tmp_path, kind, boundary):
    root = tmp_path / "t"
    mode = "direct" if kind == "direct" else "rename"
    schema = {"schema": SCHEMA_JSON} if kind in ("delta", "iceberg") else {}
    writers: list[Writer] = []
    try:
        a = Writer(
            _program(
                "A",
                root,
                kind,
                _steps_to(boundary, mode, schema),
            )
        )
        writers.append(a)
        a.proc.wait(timeout=120)
        assert a.proc.returncode == -signal.SIGKILL, f"A was not killed at {boundary}\n{a.output()}"
        # at the instant of the kill: batches 0-1, or 0-2 with the rewrite - each row once
        seen = Counter(read.arrow(str(root), columns=["id"]).column("id").to_pylist())
        assert seen in (_ids(1), _ids(2)), (boundary, sorted(seen.items())[:5])
        compacted = any(n.startswith("part-compacted-2-") for n in _live(root))
        assert compacted == (seen == _ids(2)), (boundary, _live(root))
        b = Writer(
            _program(
                "B",
                root,
                kind,
                [
                    {"do": "open", "retry_s": 10},
                    {"do": "drain"},  # a rewrite planned at the start is ready by the first batch (a trigger interval)
                    {"do": "commits", "query": QA, "count": 1, "first": 2, "mode": mode, **schema},  # Spark re-delivers batch 2
                    {"do": "close"},
                ],
            )
        )
        writers.append(b)
        assert b.wait(timeout=120) == 0, b.output()
    finally:
        stop_all(writers)
    assert Counter(read.arrow(str(root), columns=["id"]).column("id").to_pylist()) == _ids(2)
    for older in (0, 1):
        assert Counter(read.arrow(str(root), columns=["id"], as_of=older).column("id").to_pylist()) == _ids(older)
    if kind == "delta":
        assert delta_ids(root) == _ids(2)
    if kind == "iceberg":
        assert pyiceberg_ids(root) == _ids(2)
        operations = [s["summary"]["operation"] for s in current_metadata(root)["snapshots"] if s["summary"]["seo.batch-id"] == "2"]
        assert operations == ["append", "replace"], operations
    for args in (["recover"], ["gc", "--older-than", "0s"]):
        code, out = seo(*args, str(root))
        assert code == 0, out
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out
    assert Counter(read.arrow(str(root), columns=["id"]).column("id").to_pylist()) == _ids(2)


@pytest.mark.parametrize("kind,boundary", [("direct", "after-wal"), ("delta", "mid-move")])
def test_gc_after_a_kill_keeps_the_staged_rewrite_a_pending_claim_moves(tmp_path, kind, boundary):
    """The rewrite is staged in a directory of its own, older than the batch's: ``seo gc`` run
    between the kill and the restart must keep it while the claim that moves it is pending, or the
    claim can never roll forward and the table does not open."""
    root = tmp_path / "t"
    mode = "direct" if kind == "direct" else "rename"
    schema = {"schema": SCHEMA_JSON} if kind == "delta" else {}
    writers: list[Writer] = []
    try:
        a = Writer(_program("A", root, kind, _steps_to(boundary, mode, schema)))
        writers.append(a)
        a.proc.wait(timeout=120)
        assert a.proc.returncode == -signal.SIGKILL, a.output()
        staged = [p for p in (root / "_seo" / "staging").glob("*-rw*/rewrite/**/*.parquet")]
        assert staged, "the kill left no staged rewrite"
        code, out = seo("gc", "--older-than", "0s", str(root))
        assert code == 0, out
        assert all(p.exists() for p in staged), out
        code, out = seo("recover", str(root))
        assert code == 0, out
        b = Writer(
            _program(
                "B", root, kind, [{"do": "open"}, {"do": "commits", "query": QA, "count": 1, "first": 2, "mode": mode, **schema}, {"do": "close"}]
            )
        )
        writers.append(b)
        assert b.wait(timeout=120) == 0, b.output()
    finally:
        stop_all(writers)
    assert Counter(read.arrow(str(root), columns=["id"]).column("id").to_pylist()) == _ids(2)
    assert any(n.startswith("part-compacted-2-") for n in _live(root))
    if kind == "delta":
        assert delta_ids(root) == _ids(2)
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


#: a dataset group's kill points: the rewrite (in the background), the claim, the moves, the
#: tables' publication half-way and done (a group of Delta tables: its Delta steps follow them)
GROUP_CASES = [
    pytest.param(
        kind,
        b,
        marks=() if (kind, b) in {("group", "after-rewrite"), ("group", "mid-members"), ("group-delta", "after-members")} else pytest.mark.long,
        id=f"{kind}-{b}",
    )
    for kind in ("group", "group-delta")
    for b in ("after-rewrite", "after-wal", "mid-move", "mid-members", "after-members")
]
GROUP_TABLES = ("t0", "t1")


def _table_ids(table: str, upto: int) -> Counter:
    """The rows of table ``table`` up to batch ``upto``: the writer gives each table every other row."""
    index = GROUP_TABLES.index(table)
    return Counter(i for b in range(upto + 1) for i in batch_rows(0, b, 5)[index :: len(GROUP_TABLES)])


def _table_seen(root: Path, table: str, *, as_of: int | None = None) -> Counter:
    return Counter(read.arrow(str(root / table), columns=["id"], as_of=as_of).column("id").to_pylist())


@pytest.mark.parametrize("kind,boundary", GROUP_CASES)
def test_a_groups_rewrites_and_their_batch_appear_together_after_a_kill(tmp_path, kind, boundary):
    """Each table of a group compacts at its own compaction batch, inside the group's claim: a
    kill anywhere leaves each table with batches 0-1, or 0-2 with its rewrite; the next writer
    finishes or discards the group batch in every table."""
    root = tmp_path / "g"
    delta = kind == "group-delta"
    schema = {"schema": SCHEMA_JSON} if delta else {}

    def program(name: str, steps: list[dict]) -> dict:
        return {
            "name": name,
            "root": str(root),
            "group": list(GROUP_TABLES),
            "options": OPTIONS,
            "delta": {"checkpoint_interval": 10} if delta else None,
            "steps": steps,
        }

    writers: list[Writer] = []
    try:
        a = Writer(program("A", _steps_to(boundary, "rename", schema)))
        writers.append(a)
        a.proc.wait(timeout=120)
        assert a.proc.returncode == -signal.SIGKILL, f"A was not killed at {boundary}\n{a.output()}"
        for table in GROUP_TABLES:  # at the instant of the kill, table by table
            seen = _table_seen(root, table)
            assert seen in (_table_ids(table, 1), _table_ids(table, 2)), (boundary, table, sorted(seen.items())[:5])
            compacted = any(n.startswith("part-compacted-2-") for n in _live(root / table))
            assert compacted == (seen == _table_ids(table, 2)), (boundary, table, _live(root / table))
        # the rewrites planned at B's start are ready by its first batch (a stream's trigger interval)
        b = Writer(
            program(
                "B",
                [{"do": "open", "retry_s": 10}, {"do": "drain"}, {"do": "commits", "query": QA, "count": 1, "first": 2, **schema}, {"do": "close"}],
            )
        )
        writers.append(b)
        assert b.wait(timeout=120) == 0, b.output()
    finally:
        stop_all(writers)
    for table in GROUP_TABLES:
        assert _table_seen(root, table) == _table_ids(table, 2), table
        assert any(n.startswith("part-compacted-2-") for n in _live(root / table)), (table, _live(root / table))
        for older in (0, 1):
            assert _table_seen(root, table, as_of=older) == _table_ids(table, older), (table, older)
        if delta:
            assert delta_ids(root / table) == _table_ids(table, 2), table
    for args in (["recover"], ["gc", "--older-than", "0s"]):
        code, out = seo(*args, str(root))
        assert code == 0, out
    assert not list((root / "_seo" / "staging").iterdir()), "staging left after recover and gc"
    for where in (root, *(root / t for t in GROUP_TABLES)):
        code, out = seo("--json", "verify", str(where))
        assert code == 0 and json.loads(out)["problems"] == [], (where, out)
