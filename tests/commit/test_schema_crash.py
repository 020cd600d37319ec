"""kill -9 around a batch that changes its table's schema: the schema and the batch appear together
or not at all - to readers at the instant of the kill, and after the next writer's recovery.

A real writer process adds a column (``schema_evolution="add_columns"``) and SIGKILLs itself at a
commit boundary (``testing.faults``); a reader looks at the table as it was left, then a second
process recovers it and Spark "re-delivers" the batch.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.readers.visibility import committed_files
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.schema_log import schema_batches, schema_history
from tests.commit.processes import EXTRA_SCHEMA_JSON, QA, SCHEMA_JSON, Writer, stop_all

pytestmark = pytest.mark.torture

OPTIONS = {"lease_timeout_ms": 2000, "schema_evolution": "add_columns"}


def _program(name: str, root: Path, steps: list[dict], group: list[str] | None = None, formats: dict | None = None) -> dict:
    return {"name": name, "root": str(root), "group": group, "options": OPTIONS, "steps": steps, **(formats or {})}


def _columns(table: Path) -> tuple[int | None, list[str]]:
    """(latest batch, columns) as a reader sees the table now."""
    files = committed_files(str(table))
    names = [f["name"] for f in json.loads(files.schema_json)["fields"]] if files.schema_json else []
    return files.as_of, names


def _kill_then_recover(
    root: Path, boundary: str, group: list[str] | None = None, at_kill=None, formats: dict | None = None, again: str = EXTRA_SCHEMA_JSON
) -> tuple[Writer, Writer]:
    """A commits batches 0-1, then batch 2 adding ``extra`` and is killed at ``boundary``;
    ``at_kill()``; B recovers and Spark re-delivers batch 2 with schema ``again``."""
    writers: list[Writer] = []
    try:
        a = Writer(
            _program(
                "A",
                root,
                [
                    {"do": "open"},
                    {"do": "commits", "query": QA, "count": 2, "schema": SCHEMA_JSON},
                    {"do": "commits", "query": QA, "count": 1, "schema": EXTRA_SCHEMA_JSON, "crash_at": boundary},
                    {"do": "hang"},
                ],
                group,
                formats,
            )
        )
        writers.append(a)
        a.proc.wait(timeout=120)
        assert a.proc.returncode == -signal.SIGKILL, f"A was not killed at {boundary}\n{a.output()}"
        if group is None:  # what a reader sees right after the kill: batch 2 with its column, or neither
            latest, columns = _columns(root)
            assert ("extra" in columns) == (latest == 2), (boundary, latest, columns)
        if at_kill is not None:
            at_kill()
        b = Writer(
            _program(
                "B",
                root,
                [
                    {"do": "open", "retry_s": 10},
                    {"do": "commits", "query": QA, "count": 1, "first": 2, "schema": again},  # Spark re-delivers batch 2
                    {"do": "close"},
                ],
                group,
                formats,
            )
        )
        writers.append(b)
        assert b.wait(timeout=120) == 0, b.output()
        assert all(c["status"] in ("committed", "duplicate") for c in b.commits()), b.output()
        return a, b
    finally:
        stop_all(writers)


@pytest.mark.parametrize("boundary", ["before-wal", "after-wal", "after-schema", "after-manifest", "after-commit"])
def test_a_schema_change_and_its_batch_appear_together(tmp_path, boundary):
    table = tmp_path / "t"
    _, b = _kill_then_recover(table, boundary)
    recovery = b.events("open")[0]["recovery"]
    claimed = boundary != "before-wal"
    assert ("rolled_forward=[2]" in recovery) == claimed, recovery
    storage = open_storage(str(table))
    history = schema_history(storage)
    assert [(r.batch_id, r.reason) for r in history] == [(0, "create"), (2, "evolve")]
    assert history[1].changes == ("added column 'extra' (string)",)
    assert _columns(table) == (2, ["id", "p", "extra"])
    assert read.arrow(str(table), as_of=1).column_names == ["id", "p"]  # an old batch keeps its columns
    rows = read.arrow(str(table))
    assert rows.num_rows == 15 and rows.column("extra").null_count == 15  # no file has the column yet
    assert verify_table(storage).errors == []


def test_a_schema_change_of_a_group_table_and_its_batch_appear_together(tmp_path):
    """The first table's schema record is written, then the kill: recovery publishes both
    tables' records and batches - never one table's schema without its batch, nor half the group."""
    root = tmp_path / "g"

    def at_kill() -> None:  # killed after t0's record: t1 has none yet, no table shows the batch
        assert [schema_batches(open_storage(str(root / t))) for t in ("t0", "t1")] == [[0, 2], [0]]
        assert [_columns(root / t) for t in ("t0", "t1")] == [(1, ["id", "p"])] * 2

    _, b = _kill_then_recover(root, "after-schema", group=["t0", "t1"], at_kill=at_kill)
    assert "rolled_forward=[2]" in b.events("open")[0]["recovery"], b.output()
    for table in ("t0", "t1"):
        storage = open_storage(str(root / table))
        assert schema_batches(storage) == [0, 2]
        assert set(read.arrow(str(root / table), as_of=2).column_names) == {"id", "p", "extra"}
        assert set(read.arrow(str(root / table), as_of=1).column_names) == {"id", "p"}
    assert verify_table(open_storage(str(root))).errors == []


#: the schema record written, the manifest entry, the Iceberg metadata file not yet / just created;
#: with Delta: between the Delta commit (column added there) and the Iceberg one
ICEBERG_CASES = [("iceberg", "after-schema"), ("iceberg", "before-iceberg-publish"), ("iceberg", "mid-iceberg"), ("delta+iceberg", "after-delta")]


@pytest.mark.parametrize("fmt,boundary", ICEBERG_CASES, ids=[f"{f}-{b}" for f, b in ICEBERG_CASES])
def test_an_iceberg_tables_added_column_and_its_batch_appear_together(tmp_path, fmt, boundary):
    """``schema_evolution="add_columns"`` on an Iceberg table (and Delta + Iceberg): killed at each
    boundary of the batch that adds ``extra``, then recovered. Every Iceberg metadata version
    has the column exactly when it holds that batch (the same version adds both), and Delta's
    log likewise."""
    from pyiceberg.table import StaticTable

    table = tmp_path / "t"
    formats = {"iceberg": {}, **({"delta": {"checkpoint_interval": 10}} if fmt == "delta+iceberg" else {})}
    _, b = _kill_then_recover(table, boundary, formats=formats)
    assert "rolled_forward=[2]" in b.events("open")[0]["recovery"], b.output()
    for path in sorted((table / "metadata").glob("v*.metadata.json")):
        meta = json.loads(path.read_text())
        schema = next(s for s in meta["schemas"] if s["schema-id"] == meta["current-schema-id"])
        batch = max((int(v) for k, v in meta["properties"].items() if k.startswith("seo.batch-id.")), default=-1)
        assert ("extra" in [f["name"] for f in schema["fields"]]) == (batch >= 2), (path.name, batch)
    iceberg = StaticTable.from_metadata(str(table))
    rows = iceberg.scan().to_arrow()
    assert rows.num_rows == 15 and rows.column("extra").null_count == 15
    assert iceberg.schema().find_field("extra").optional
    if fmt == "delta+iceberg":
        from deltalake import DeltaTable

        assert DeltaTable(str(table)).to_pyarrow_table().column_names == ["id", "p", "extra"]
        assert "extra" not in DeltaTable(str(table), version=1).to_pyarrow_table().column_names
    assert _columns(table) == (2, ["id", "p", "extra"])
    assert verify_table(open_storage(str(table))).errors == []


def test_a_discarded_claims_schema_record_is_not_the_schema_of_the_batch_that_reuses_its_number(tmp_path):
    """A is killed after batch 2's schema record (``extra`` added); the claim's data files are then
    lost (deleted outside the protocol), so a person discards the claim (``seo recover
    --discard-wal 2``). The record stays behind. Spark re-runs batch 2 with the old columns, which
    change no schema: it must be read with batch 0's schema, not the discarded one's."""
    from streaming_exactly_once.table.schema_log import schema_as_of
    from tests.commit.power_cut_runs import seo

    table = tmp_path / "t"

    def lose_and_discard() -> None:
        assert schema_batches(open_storage(str(table))) == [0, 2]
        lost = [*table.glob("p=a/part-*-2.c000.snappy.parquet"), *(table / "_seo" / "staging").glob("2-*/data/p=a/*.parquet")]
        assert lost
        for path in lost:
            path.unlink()  # the claim can never complete
        code, out = seo("recover", "--discard-wal", "2", "--lease-timeout", "2s", str(table))
        assert code == 0, out

    _kill_then_recover(table, "after-schema", at_kill=lose_and_discard, again=SCHEMA_JSON)
    storage = open_storage(str(table))
    assert schema_as_of(storage, 2) == schema_as_of(storage, 0)
    assert [(r.batch_id, r.reason) for r in schema_history(storage)] == [(0, "create")]
    assert _columns(table) == (2, ["id", "p"])
    assert verify_table(storage).errors == []
