"""The Iceberg layer and its commit step, without Spark: real Parquet files, real Iceberg metadata
written with pyiceberg through our storage, read back by pyiceberg (path-based, through the
version hint) and polars - never by our own code alone."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from streaming_exactly_once.commit.protocol.step import REGISTRY
from streaming_exactly_once.commit.table_steps.format_step import CommitIceberg, iceberg_snapshot_note
from streaming_exactly_once.errors import IcebergTableError, InvalidAsOfError
from streaming_exactly_once.iceberg import IcebergFile, batch_property
from streaming_exactly_once.storage import open_storage
from tests.iceberg.helpers import (
    APP,
    SCHEMA,
    batch_files,
    context,
    iceberg_ids,
    ids_of,
    metadata_json,
    our_snapshots,
    parquet,
    run,
    stage,
    step,
    target,
)


def rows(batches) -> Counter:
    return Counter(i for b in batches for i in ids_of(b))


def test_each_batch_is_one_snapshot_with_the_batch_in_its_summary_and_the_table_property(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    ctx = context(storage)
    for b in range(4):
        run(step(b, batch_files(storage, b)), ctx)
        assert iceberg_snapshot_note(ctx) == our_snapshots(tmp_path / "t")[b]
    table = tmp_path / "t"
    meta = metadata_json(table)
    assert sorted(os.listdir(table / "metadata")).count("v4.metadata.json") == 1
    assert (table / "metadata" / "version-hint.text").read_text() == "4"  # as Spark's Hadoop catalog writes it
    assert meta["properties"][batch_property(APP)] == "3"
    # the commit was built on a slim view of the table, then applied to the full metadata: the logs are whole
    assert [e["snapshot-id"] for e in meta["snapshot-log"]] == [s["snapshot-id"] for s in meta["snapshots"]]
    assert [e["metadata-file"].rsplit("/", 1)[1] for e in meta["metadata-log"]] == [f"v{v}.metadata.json" for v in (1, 2, 3)]
    assert [s.get("parent-snapshot-id") for s in meta["snapshots"]] == [None] + [s["snapshot-id"] for s in meta["snapshots"][:-1]]
    assert [s["sequence-number"] for s in meta["snapshots"]] == [1, 2, 3, 4]
    assert [s["summary"]["total-records"] for s in meta["snapshots"]] == ["4", "8", "12", "16"]
    assert list(our_snapshots(table)) == [0, 1, 2, 3]
    summary = meta["snapshots"][2]["summary"]
    assert (summary["operation"], summary["seo.batch-id"], summary["seo.queryId"], summary["seo.sparkBatchId"]) == ("append", "2", "q-1", "2")
    assert summary["added-records"] == "4" and summary["added-data-files"] == "2"
    # what an Iceberg reader sees: every row once, the partition column filled from the spec
    assert iceberg_ids(str(table)) == rows(range(4))
    assert set(iceberg_ids(str(table), column="p")) == {"a"}
    # time travel: the snapshot of batch 1 holds batches 0 and 1
    snap1 = target(storage).snapshot_for_batch(1)
    assert snap1 == our_snapshots(table)[1]
    assert iceberg_ids(str(table), snapshot_id=snap1) == rows(range(2))
    # the table is created with the name mapping Spark's files need (they carry no field ids)
    assert json.loads(meta["properties"]["schema.name-mapping.default"]) == [
        {"names": ["id"], "field-id": 1},
        {"names": ["p"], "field-id": 2},
    ]
    assert meta["partition-specs"][0]["fields"] == [{"source-id": 2, "field-id": 1000, "transform": "identity", "name": "p"}]


def test_polars_reads_the_table_through_its_metadata_file(tmp_path):
    pl = pytest.importorskip("polars")
    storage = open_storage(str(tmp_path / "t"))
    ctx = context(storage)
    for b in range(3):
        run(step(b, batch_files(storage, b)), ctx)
    current = metadata_json(tmp_path / "t")
    version = len([n for n in os.listdir(tmp_path / "t" / "metadata") if n.endswith(".metadata.json")])
    assert current["current-snapshot-id"] == our_snapshots(tmp_path / "t")[2]
    os.environ.setdefault("POLARS_ICEBERG_PLANNER", "pyiceberg")
    frame = pl.scan_iceberg(str(tmp_path / "t" / "metadata" / f"v{version}.metadata.json")).collect()
    assert Counter(frame["id"].to_list()) == rows(range(3))
    assert set(frame["p"].to_list()) == {"a"}


def test_batches_reach_the_table_in_order_and_a_lost_commit_stops_the_next(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    ctx = context(storage)
    with pytest.raises(IcebergTableError, match=r"batches reach it in order and 1 is the last") as caught:
        run(step(2, batch_files(storage, 2)), ctx)
    assert not (tmp_path / "t" / "metadata").exists() and caught.value.batch_id == 2
    for b in range(3):
        run(step(b, batch_files(storage, b, tag="x")), ctx)
    # the newest metadata file is lost (a restore from an older backup): batch 3 must not go on top
    os.remove(tmp_path / "t" / "metadata" / "v3.metadata.json")
    (tmp_path / "t" / "metadata" / "version-hint.text").write_text("2")
    with pytest.raises(IcebergTableError, match=r"holds batches up to 1 .*2 is the last one committed"):
        run(step(3, batch_files(storage, 3)), context(storage))


def test_idempotence_survives_snapshot_expiry(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    ctx = context(storage)
    for b in range(4):
        run(step(b, batch_files(storage, b)), ctx)
    t = target(storage)
    snapshots = our_snapshots(tmp_path / "t")
    t.expire_snapshots([snapshots[b] for b in range(3)])
    assert list(our_snapshots(tmp_path / "t")) == [3]
    assert t.applied_batch() == 3
    # replays of expired batches add nothing; the next batch follows
    for b in (0, 2, 3):
        s = step(b, batch_files(storage, b, tag="-again"))
        assert s.verify(context(storage))
        t.commit(b, s.files, schema_json=SCHEMA, partition_by=["p"], metadata={})
    run(step(4, batch_files(storage, 4)), context(storage))
    assert list(our_snapshots(tmp_path / "t")) == [3, 4]
    assert iceberg_ids(str(tmp_path / "t")) == rows(range(5))
    with pytest.raises(InvalidAsOfError, match="snapshot expiry removed it"):
        t.snapshot_for_batch(1)
    with pytest.raises(InvalidAsOfError, match="its newest batch is 4"):
        t.snapshot_for_batch(5)
    assert t.batch_of_snapshot(our_snapshots(tmp_path / "t")[4]) == 4


def test_a_stale_or_missing_version_hint_is_only_a_hint(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    ctx = context(storage)
    for b in range(3):
        run(step(b, batch_files(storage, b)), ctx)
    hint = tmp_path / "t" / "metadata" / "version-hint.text"
    hint.write_text("1")  # a writer died between the metadata file and the hint, twice
    assert target(storage).applied_batch() == 2
    run(step(3, batch_files(storage, 3)), context(storage))
    assert hint.read_text() == "4"
    hint.unlink()
    assert target(storage).applied_batch() == 3
    hint.write_text("garbage")
    run(step(4, batch_files(storage, 4)), context(storage))
    assert iceberg_ids(str(tmp_path / "t")) == rows(range(5))


def test_a_commit_that_lost_its_race_is_never_rebased_onto_the_winner(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    slow, fast = target(storage), target(storage)
    run(step(0, batch_files(storage, 0)), context(storage))
    assert slow.applied_batch() == 0  # slow has read version 1
    fast.commit(1, batch_files(storage, 1, tag="f"), schema_json=SCHEMA, partition_by=["p"], metadata={})
    # slow commits the same batch on the version it read: its v2 exists, so it reads again and finds the batch
    found = slow.commit(1, batch_files(storage, 1, tag="s"), schema_json=SCHEMA, partition_by=["p"], metadata={}, fresh=True)
    assert found == our_snapshots(tmp_path / "t")[1]
    assert len(metadata_json(tmp_path / "t")["snapshots"]) == 2
    assert iceberg_ids(str(tmp_path / "t")) == rows(range(2))
    # its manifests of the lost attempt were deleted: no metadata names them
    avro = [n for n in os.listdir(tmp_path / "t" / "metadata") if n.endswith(".avro")]
    assert len(avro) == 4  # two snapshots: a manifest and a manifest list each
    # a foreign commit in between (another app's snapshot): the batch is built afresh on top
    other = target(storage)
    other.app_id = "streaming-exactly-once:other"
    assert slow.applied_batch() == 1
    other.commit(0, batch_files(storage, 7, tag="o", partition="p=b"), schema_json=SCHEMA, partition_by=["p"], metadata={})
    slow.commit(2, batch_files(storage, 2), schema_json=SCHEMA, partition_by=["p"], metadata={}, fresh=True)
    assert list(our_snapshots(tmp_path / "t")) == [0, 1, 2]
    assert iceberg_ids(str(tmp_path / "t")) == rows([0, 1, 2, 7])


def test_a_writer_frozen_before_its_create_loses_even_where_later_versions_retired_that_slot(tmp_path):
    """``slow`` read version 1 and commits batch 1 at v2 only after ``fast`` committed batches 1-4
    with one previous version kept: v2 (and the v1 it was built on) were deleted meanwhile, so
    its create-if-absent succeeds. It must count as a lost race: the file goes, the hint stays,
    the batch is found done, and nothing it wrote is left."""
    from streaming_exactly_once.iceberg.settings import IcebergSettings

    table = tmp_path / "t"
    storage = open_storage(str(table))
    run(step(0, batch_files(storage, 0), settings=IcebergSettings(previous_versions=1)), context(storage))
    slow, fast = target(storage), target(storage)
    assert slow.applied_batch() == 0  # slow has read version 1
    for b in range(1, 5):
        fast.commit(b, batch_files(storage, b, tag="f"), schema_json=SCHEMA, partition_by=["p"], metadata={})
    assert not (table / "metadata" / "v2.metadata.json").exists()  # retired
    found = slow.commit(1, batch_files(storage, 1, tag="s"), schema_json=SCHEMA, partition_by=["p"], metadata={}, fresh=True)
    assert found == our_snapshots(table)[1]
    assert (table / "metadata" / "version-hint.text").read_text() == "5"
    assert not (table / "metadata" / "v2.metadata.json").exists()
    assert iceberg_ids(str(table)) == rows(range(5))
    named = json.dumps(metadata_json(table))
    assert all(n in named for n in os.listdir(table / "metadata") if n.startswith("snap-"))  # the lost attempt's files went


@pytest.mark.parametrize(("first", "successors"), [(True, 2), (False, 1), (False, 2)], ids=["first-version", "base-retired", "itself-retired"])
def test_a_writer_frozen_right_after_its_create_keeps_the_commit_its_successors_built_on(tmp_path, monkeypatch, first, successors):
    """``slow``'s create lands, and it freezes right after; ``fast`` takes over and commits on
    top of it (with one previous version kept, the version ``slow`` built on is retired, then
    its own). Woken, ``slow`` must see its commit landed: deleting its metadata file and its
    manifests would leave the current snapshot naming files that are gone, and pointing the
    hint at its version would send path readers back."""
    from streaming_exactly_once.iceberg.settings import IcebergSettings

    table = tmp_path / "t"
    storage = open_storage(str(table))
    if not first:
        run(step(0, batch_files(storage, 0), settings=IcebergSettings(previous_versions=1)), context(storage))
    slow, fast = target(storage), target(storage)
    batch = 0 if first else 1
    real = type(storage).put_if_absent
    frozen: list[str] = []

    def create_then_successor(self, path, data, *a, **kw):
        real(self, path, data, *a, **kw)
        if path.endswith(".metadata.json") and not frozen:
            frozen.append(path)
            for b in range(batch + 1, batch + 1 + successors):
                fast.commit(b, batch_files(storage, b, tag="f"), schema_json=SCHEMA, partition_by=["p"], metadata={})

    monkeypatch.setattr(type(storage), "put_if_absent", create_then_successor)
    slow.commit(batch, batch_files(storage, batch, tag="s"), schema_json=SCHEMA, partition_by=["p"], metadata={})
    monkeypatch.undo()
    assert frozen == [f"metadata/v{batch + 1}.metadata.json"]
    newest = batch + 1 + successors
    assert list(our_snapshots(table)) == list(range(newest))
    assert iceberg_ids(str(table)) == rows(range(newest))  # every manifest the current snapshot names is there
    assert (table / "metadata" / "version-hint.text").read_text() == str(newest)
    assert (table / "metadata" / frozen[0].rsplit("/", 1)[-1]).exists() == (first or successors == 1)


def test_a_writer_frozen_inside_its_hint_write_does_not_point_it_at_a_retired_version(tmp_path, monkeypatch):
    """``slow`` created v3 and freezes inside its write of ``version-hint.text``; ``fast``
    commits three more versions with one previous version kept, so v3 and v4 are retired. Woken,
    ``slow`` finishes its write: the hint then names a file that is gone, and it must point it
    at the newest version again."""
    from streaming_exactly_once.iceberg import catalogs
    from streaming_exactly_once.iceberg.settings import IcebergSettings

    table = tmp_path / "t"
    storage = open_storage(str(table))
    run(step(0, batch_files(storage, 0), settings=IcebergSettings(previous_versions=1)), context(storage))
    run(step(1, batch_files(storage, 1)), context(storage))
    slow, fast = target(storage), target(storage)
    real = catalogs.PathCatalog.write_hint
    frozen: list[int] = []

    def successor_then_write(self, version):
        if self is slow.catalog() and not frozen:
            frozen.append(version)
            for b in (3, 4, 5):
                fast.commit(b, batch_files(storage, b, tag="f"), schema_json=SCHEMA, partition_by=["p"], metadata={})
        real(self, version)

    monkeypatch.setattr(catalogs.PathCatalog, "write_hint", successor_then_write)
    slow.commit(2, batch_files(storage, 2, tag="s"), schema_json=SCHEMA, partition_by=["p"], metadata={})
    monkeypatch.undo()
    assert frozen == [3] and not (table / "metadata" / "v3.metadata.json").exists()
    assert (table / "metadata" / "version-hint.text").read_text() == "6"
    assert iceberg_ids(str(table)) == rows(range(6))  # through the hint, as path-based readers go


def test_a_create_that_landed_but_answered_exists_is_our_commit(tmp_path, monkeypatch):
    """A conditional PUT retried after its answer was lost is refused (412) although it landed:
    the metadata file there is ours, so the commit stands - its files are not discarded."""
    storage = open_storage(str(tmp_path / "t"))
    run(step(0, batch_files(storage, 0)), context(storage))
    real = type(storage).put_if_absent

    def landed_then_exists(self, path, data, *a, **kw):
        real(self, path, data, *a, **kw)
        if path.endswith(".metadata.json"):
            raise FileExistsError(path)

    monkeypatch.setattr(type(storage), "put_if_absent", landed_then_exists)
    run(step(1, batch_files(storage, 1)), context(storage))
    monkeypatch.undo()
    run(step(2, batch_files(storage, 2)), context(storage))
    assert list(our_snapshots(tmp_path / "t")) == [0, 1, 2]
    assert iceberg_ids(str(tmp_path / "t")) == rows(range(3))


def test_a_commit_whose_answer_was_lost_is_found_and_not_repeated(tmp_path, monkeypatch):
    storage = open_storage(str(tmp_path / "t"))
    run(step(0, batch_files(storage, 0)), context(storage))
    from streaming_exactly_once.iceberg import catalogs

    real = catalogs.PathCatalog.commit_table

    def commit_then_fail(self, *args, **kwargs):
        real(self, *args, **kwargs)
        raise ConnectionError("the answer was lost")

    monkeypatch.setattr(catalogs.PathCatalog, "commit_table", commit_then_fail)
    s = step(1, batch_files(storage, 1))
    with pytest.raises(IcebergTableError, match=r"batch 1 .* failed: ConnectionError.*stays pending in the WAL"):
        run(s, context(storage))
    monkeypatch.undo()
    run(s, context(storage))  # the roll-forward
    assert list(our_snapshots(tmp_path / "t")) == [0, 1]
    assert iceberg_ids(str(tmp_path / "t")) == rows(range(2))


def test_a_failed_sync_before_the_metadata_commits_nothing_and_the_retry_writes_new_files(tmp_path, monkeypatch):
    storage = open_storage(str(tmp_path / "t"))
    run(step(0, batch_files(storage, 0)), context(storage))
    calls = []
    real_sync = type(storage).sync

    def failing_sync(self, paths, **kw):
        calls.append(list(paths))
        raise OSError(5, "I/O error")

    monkeypatch.setattr(type(storage), "sync", failing_sync)
    s = step(1, batch_files(storage, 1))
    with pytest.raises(IcebergTableError, match="OSError"):
        run(s, context(storage))
    assert calls and all(p.startswith("metadata/") and p.endswith(".avro") for p in calls[0])
    assert len(metadata_json(tmp_path / "t")["snapshots"]) == 1  # nothing committed
    monkeypatch.setattr(type(storage), "sync", real_sync)
    run(s, context(storage))
    assert list(our_snapshots(tmp_path / "t")) == [0, 1]
    snapshot = metadata_json(tmp_path / "t")["snapshots"][1]
    assert all(p not in snapshot["manifest-list"] for p in calls[0])  # new names, never the unsynced ones


def test_the_wal_line_is_stable_and_round_trips():
    s = step(12, [IcebergFile("day=2024-01-01/part-00000.c000.snappy.parquet", 903, 1795313165250)], partition_by=["day"])
    line = json.dumps(s.to_json(), separators=(",", ":"))
    assert line == (
        '{"kind":"iceberg","batchId":12,"appId":"%s","partitionBy":["day"],"schema":%s,'
        '"files":[["day=2024-01-01/part-00000.c000.snappy.parquet",903,1795313165250]],'
        '"minCountToMerge":100,"previousVersions":100,"info":{"queryId":"q-1","sparkBatchId":"12"}}'
    ) % (APP, json.dumps(SCHEMA))
    assert REGISTRY["iceberg"] is CommitIceberg
    back = CommitIceberg.from_json(json.loads(line))
    assert back == s
    from streaming_exactly_once.iceberg import IcebergCatalogRef

    named = step(1, [], catalog=IcebergCatalogRef("prod", "db.orders"), table="orders")
    obj = named.to_json()
    assert obj["table"] == "orders" and obj["catalog"] == {"name": "prod", "identifier": "db.orders"}
    assert CommitIceberg.from_json(obj) == named


def test_partition_values_come_from_the_directory_names(tmp_path):
    import pyarrow as pa

    schema = json.dumps(
        {
            "type": "struct",
            "fields": [
                {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                {"name": "day", "type": "date", "nullable": True, "metadata": {}},
                {"name": "n", "type": "integer", "nullable": True, "metadata": {}},
                {"name": "s", "type": "string", "nullable": True, "metadata": {}},
            ],
        }
    )
    storage = open_storage(str(tmp_path / "t"))
    files = [
        stage(storage, "day=2024-01-02/n=7/s=a%3Db/part-0.parquet", parquet([1])),
        stage(storage, "day=2024-01-03/n=-1/s=__HIVE_DEFAULT_PARTITION__/part-1.parquet", parquet([2])),
    ]
    run(step(0, files, schema=schema, partition_by=["day", "n", "s"]), context(storage))
    from pyiceberg.table import StaticTable

    got = StaticTable.from_metadata(str(tmp_path / "t")).scan().to_arrow().sort_by("id")
    assert got.column("s").to_pylist() == ["a=b", None]
    assert got.column("n").to_pylist() == [7, -1]
    assert [str(d) for d in got.column("day").to_pylist()] == ["2024-01-02", "2024-01-03"]
    assert got.schema.field("day").type == pa.date32()


def test_files_that_are_not_complete_parquet_or_hold_int96_timestamps_are_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    storage = open_storage(str(tmp_path / "t"))
    good = parquet([1, 2])
    torn = stage(storage, "p=a/torn.parquet", good[:-10])
    with pytest.raises(IcebergTableError, match="not a complete Parquet file"):
        run(step(0, [torn]), context(storage))
    path = tmp_path / "t" / "p=a" / "int96.parquet"
    pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "ts": pa.array([0], pa.timestamp("us"))}), path, use_deprecated_int96_timestamps=True)
    int96 = IcebergFile("p=a/int96.parquet", path.stat().st_size, 0)
    with pytest.raises(IcebergTableError, match="INT96 .*cannot be discarded. Run `seo recover <table> --accept-int96`"):
        run(step(0, [int96]), context(storage))
    assert not (tmp_path / "t" / "metadata").exists()


def test_upkeep_sees_every_file_a_retained_snapshot_needs(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    ctx = context(storage)
    for b in range(3):
        run(step(b, batch_files(storage, b)), ctx)
    t = target(storage)
    on_disk = {str(p.relative_to(tmp_path / "t")) for p in (tmp_path / "t").rglob("*") if p.is_file()}
    assert t.referenced_files() == on_disk
    live = t.live_files()
    assert sorted(f.path for f in live) == sorted(p for p in on_disk if p.startswith("p=a/"))
    assert sum(f.rows or 0 for f in live) == 12
    first = t.live_files(our_snapshots(tmp_path / "t")[0])
    assert sorted(f.path for f in first) == sorted(f"p=a/part-{i:05d}-0.c000.snappy.parquet" for i in range(2))
    # after expiry, the files only expired snapshots named are no longer needed (data files stay live here)
    t.expire_snapshots([our_snapshots(tmp_path / "t")[0]])
    kept = t.referenced_files()
    assert all(p.startswith("p=a/") or p.startswith("metadata/") for p in kept)
    assert {p for p in on_disk if p.startswith("p=a/")} <= kept
    status = t.status()
    assert status["batchId"] == 2 and status["snapshotId"] == our_snapshots(tmp_path / "t")[2]


def test_duckdb_reads_the_table_where_its_iceberg_extension_loads(tmp_path):
    """DuckDB's iceberg extension is not on PyPI for every DuckDB release and is otherwise
    downloaded at run time (no network here): the test runs where ``LOAD iceberg`` works.
    Verified by hand with duckdb 1.4.4 and the PyPI package duckdb-ext-iceberg 1.4.4 (iceberg_scan
    on the table directory and on a metadata file: every row, the partition column filled)."""
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect(config={"autoinstall_known_extensions": "false"})
    try:
        con.execute("LOAD iceberg")
    except Exception as exc:
        pytest.skip(f"DuckDB's iceberg extension does not load offline here: {str(exc).splitlines()[0][:120]}")
    storage = open_storage(str(tmp_path / "t"))
    ctx = context(storage)
    for b in range(3):
        run(step(b, batch_files(storage, b)), ctx)
    got = con.execute(f"SELECT id, p FROM iceberg_scan('{tmp_path / 't'}')").fetchall()
    assert Counter(i for i, _ in got) == rows(range(3)) and {p for _, p in got} == {"a"}


def test_spark_types_round_trip_through_the_iceberg_schema(tmp_path):
    """Each Spark type as Spark's Parquet writer stores it (byte/short as INT32 with an 8/16-bit
    annotation, timestamps as micros, decimals by precision, three-level lists and maps), read back
    by pyiceberg through the name mapping (the files carry no field ids)."""
    import datetime
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    fields = [
        ("b", "byte", pa.int8(), 1),
        ("s", "short", pa.int16(), 2),
        ("i", "integer", pa.int32(), 3),
        ("l", "long", pa.int64(), 4),
        ("f", "float", pa.float32(), 1.5),
        ("d", "double", pa.float64(), 2.5),
        ("str", "string", pa.string(), "x"),
        ("bin", "binary", pa.binary(), b"\x00\x01"),
        ("bool", "boolean", pa.bool_(), True),
        ("day", "date", pa.date32(), datetime.date(2024, 1, 2)),
        ("ts", "timestamp", pa.timestamp("us", tz="UTC"), datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)),
        ("ntz", "timestamp_ntz", pa.timestamp("us"), datetime.datetime(2024, 1, 2, 3, 4, 5)),
        ("dec", "decimal(10,2)", pa.decimal128(10, 2), decimal.Decimal("12.34")),
        ("arr", {"type": "array", "elementType": "long", "containsNull": True}, pa.list_(pa.int64()), [1, 2]),
        (
            "m",
            {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True},
            pa.map_(pa.string(), pa.int64()),
            [("k", 7)],
        ),
        (
            "st",
            {"type": "struct", "fields": [{"name": "a", "type": "integer", "nullable": True, "metadata": {}}]},
            pa.struct([("a", pa.int32())]),
            {"a": 9},
        ),
    ]
    schema = json.dumps({"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t, _, _ in fields]})
    table = pa.table({n: pa.array([v], type=a) for n, _, a, v in fields})
    storage = open_storage(str(tmp_path / "t"))
    path = tmp_path / "t" / "part-0.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    run(step(0, [IcebergFile("part-0.parquet", path.stat().st_size, 0)], schema=schema, partition_by=()), context(storage))
    from pyiceberg.table import StaticTable

    got = StaticTable.from_metadata(str(tmp_path / "t")).scan().to_arrow().to_pylist()[0]
    assert {k: got[k] for k in ("b", "s", "i", "l", "f", "d", "str", "bin", "bool", "day", "ntz", "dec", "arr", "st")} == {
        n: v for n, _, _, v in fields if n not in ("ts", "m")
    }
    assert got["ts"] == fields[10][3] and dict(got["m"]) == {"k": 7}


def test_old_metadata_files_are_retired_and_readers_still_find_the_table(tmp_path):
    from streaming_exactly_once.iceberg import IcebergSettings

    storage = open_storage(str(tmp_path / "t"))
    ctx = context(storage)
    for b in range(5):
        run(step(b, batch_files(storage, b), settings=IcebergSettings(previous_versions=2)), ctx)
    names = sorted(n for n in os.listdir(tmp_path / "t" / "metadata") if n.endswith(".metadata.json"))
    assert names == ["v3.metadata.json", "v4.metadata.json", "v5.metadata.json"]  # each file holds the whole history
    meta = metadata_json(tmp_path / "t")
    assert meta["properties"]["write.metadata.previous-versions-max"] == "2"
    assert iceberg_ids(str(tmp_path / "t")) == rows(range(5))
    (tmp_path / "t" / "metadata" / "version-hint.text").write_text("1")  # a hint naming a retired file: listed instead
    assert target(storage).applied_batch() == 4
