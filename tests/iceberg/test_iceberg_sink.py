"""``ExactlyOnceSink(format="iceberg")`` with real streaming queries (local[2]).

Iceberg readers are pyiceberg (``scan().to_arrow()``, by path) and polars ``scan_iceberg`` - no
Spark, no Iceberg jars - and the manifest readers are vanilla ``spark.read.parquet`` and ours;
all of them must see every input id exactly once, at every batch.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter

import pytest

from streaming_exactly_once import DatasetSink, ExactlyOnceSink, read
from streaming_exactly_once.errors import ConfigError
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from tests.datagen import PARTITION_VALUES, write_csv_files
from tests.iceberg.table_helpers import current_metadata, pyiceberg_ids, snapshots_by_batch
from tests.sink.conftest import assert_exactly_once, run_query

pytestmark = pytest.mark.spark


def polars_ids(table, *, snapshot_id: int | None = None) -> Counter:
    import polars as pl

    os.environ["POLARS_ICEBERG_PLANNER"] = "pyiceberg"  # polars' own planner is a package not installed here
    version = int((table / "metadata" / "version-hint.text").read_text())
    frame = pl.scan_iceberg(str(table / "metadata" / f"v{version}.metadata.json"), snapshot_id=snapshot_id).collect()
    return Counter(frame.get_column("id").to_list())


def assert_table_clean(table) -> None:
    """No pending WAL, no staging, and the data files are exactly the manifest's (``metadata/``
    is the Iceberg table's: gc and verify read it with the Iceberg metadata)."""
    from streaming_exactly_once.manifest.manifest_log import ManifestLog
    from streaming_exactly_once.table.layout import STAGING_DIR, is_hidden

    storage = open_storage(str(table))
    assert storage.list_dir("_seo/wal") == [] and storage.list_dir(STAGING_DIR) == []
    listed = {e.uri for e in ManifestLog(storage).files()}
    on_disk = {storage.uri(f.path) for f in storage.walk_files() if not is_hidden(f.path) and not f.path.startswith("metadata/")}
    assert on_disk == listed


def every_batch_agrees(table) -> None:
    """At every batch: pyiceberg and polars on its snapshot, and our readers as of it, see the same rows."""
    for batch, snapshot in snapshots_by_batch(table).items():
        ours = Counter(read.arrow(str(table), as_of=batch).column("id").to_pylist())
        assert pyiceberg_ids(table, snapshot_id=snapshot) == ours == polars_ids(table, snapshot_id=snapshot), batch
        assert read.iceberg_snapshot(str(table), as_of=batch) == snapshot


@pytest.mark.parametrize("mode", ["rename", "direct"])
def test_stream_to_iceberg_every_row_once_for_every_reader(spark, tmp_path, mode):
    ids = write_csv_files(tmp_path / "in", n_files=7, rows_per_file=12)
    table = tmp_path / "out_table"
    sink, error = run_query(spark, tmp_path / "in", table, tmp_path / "ckpt", format="iceberg", partition_by=["p"], staging_mode=mode)
    assert error is None
    assert sink.counters["committed"] == 4
    expected = Counter(ids)
    assert pyiceberg_ids(table) == expected == polars_ids(table)
    assert_exactly_once(spark, table, ids)  # vanilla Spark through _spark_metadata
    assert_table_clean(table)
    assert not [p for p in (table / "metadata").iterdir() if p.name.startswith(".")]  # no temp file left
    assert sorted(snapshots_by_batch(table)) == list(range(4))  # one snapshot per batch
    every_batch_agrees(table)
    from pyiceberg.table import StaticTable

    rows = StaticTable.from_metadata(str(table)).scan(selected_fields=("id", "p")).to_arrow().to_pylist()
    assert {r["id"]: r["p"] for r in rows} == {i: PARTITION_VALUES[i % 4] for i in ids}  # 'a b', 'c%d', 'é/ü' survive
    assert verify_table(open_storage(str(table))).problems == []


def test_replay_and_recreated_checkpoint_add_no_snapshot_and_no_row(spark, tmp_path):
    first = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=6)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    run_query(spark, tmp_path / "in", table, ckpt, format="iceberg", partition_by=["p"], iceberg_snapshots_to_keep=2)
    snapshots = snapshots_by_batch(table)
    last = max(int(n) for n in os.listdir(ckpt / "commits") if n.isdigit())
    os.remove(ckpt / "commits" / str(last))  # Spark replays its last batch
    if (ckpt / "commits" / f".{last}.crc").exists():
        os.remove(ckpt / "commits" / f".{last}.crc")
    sink, error = run_query(spark, tmp_path / "in", table, ckpt, format="iceberg", partition_by=["p"], iceberg_snapshots_to_keep=2)
    assert error is None and sink.counters["duplicates"] == 1
    assert snapshots_by_batch(table) == snapshots and pyiceberg_ids(table) == Counter(first)
    shutil.rmtree(ckpt)  # checkpoint lost (and batch 0's snapshot expired): every file is read again, with new ones
    second = write_csv_files(tmp_path / "in", n_files=2, rows_per_file=6, start_file=4)
    sink, error = run_query(
        spark, tmp_path / "in", table, ckpt, format="iceberg", partition_by=["p"], files_per_trigger=6, iceberg_snapshots_to_keep=2
    )
    assert error is None and sink.counters["skipped_rows"] == len(first)
    assert pyiceberg_ids(table) == polars_ids(table) == Counter(first + second)
    assert_exactly_once(spark, table, first + second)
    assert sorted(snapshots_by_batch(table)) == [1, 2]


@pytest.mark.parametrize("boundary", ["after-manifest", "mid-iceberg", "after-iceberg"])
def test_failure_around_the_iceberg_commit_then_restart(spark, tmp_path, monkeypatch, boundary):
    ids = write_csv_files(tmp_path / "in", n_files=6, rows_per_file=5)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    monkeypatch.setenv("SEO_FAIL_AT", f"{boundary}@2")
    _, error = run_query(spark, tmp_path / "in", table, ckpt, format="iceberg", partition_by=["p"])
    assert error is not None and "injected failure" in str(error)
    monkeypatch.delenv("SEO_FAIL_AT")
    _, error = run_query(spark, tmp_path / "in", table, ckpt, format="iceberg", partition_by=["p"])
    assert error is None
    assert pyiceberg_ids(table) == Counter(ids)
    assert_exactly_once(spark, table, ids)
    assert sorted(snapshots_by_batch(table)) == list(range(3))


def test_delta_and_iceberg_from_one_query_agree_at_every_batch(spark, tmp_path, monkeypatch):
    from tests.delta.readback import batch_commits, delta_ids

    ids = write_csv_files(tmp_path / "in", n_files=6, rows_per_file=5)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    monkeypatch.setenv("SEO_FAIL_AT", "before-iceberg@2")  # the 2nd batch dies between its Delta and Iceberg commits
    _, error = run_query(spark, tmp_path / "in", table, ckpt, format=["delta", "iceberg"], partition_by=["p"])
    assert error is not None and "injected failure" in str(error)
    assert sorted(batch_commits(table)) == [0, 1] and sorted(snapshots_by_batch(table)) == [0]
    monkeypatch.delenv("SEO_FAIL_AT")
    _, error = run_query(spark, tmp_path / "in", table, ckpt, format="delta+iceberg", partition_by=["p"])
    assert error is None
    expected = Counter(ids)
    assert pyiceberg_ids(table) == delta_ids(table) == expected
    assert_exactly_once(spark, table, ids)
    for batch, snapshot in snapshots_by_batch(table).items():
        rows = Counter(read.arrow(str(table), as_of=batch).column("id").to_pylist())
        assert pyiceberg_ids(table, snapshot_id=snapshot) == delta_ids(table, version=batch) == rows
    with pytest.raises(ConfigError, match="format='delta'"):  # a restart without one of its formats
        run_query(spark, tmp_path / "in", table, ckpt, format="delta", partition_by=["p"])


def test_an_existing_pyiceberg_table_is_adopted_and_keeps_its_rows(spark, tmp_path):
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    from streaming_exactly_once.iceberg.fileio import StorageFileIO  # noqa: F401 - the layer's own catalog writes it below
    from tests.iceberg.helpers import target

    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=5)
    table = tmp_path / "t"
    # an Iceberg table written by pyiceberg itself, through the path-based catalog, before the sink
    storage = open_storage(str(table))
    catalog = target(storage).catalog()
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "p", StringType()), NestedField(3, "v", DoubleType()))
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
    old_rows = pa.table({"id": pa.array([-1, -2], pa.int64()), "p": ["old", "a b"], "v": [0.5, 1.5]})
    txn = catalog.create_table_transaction(catalog.identifier, schema, location=str(table), partition_spec=spec)
    txn.append(old_rows)  # pyiceberg's default layout: <table>/data/p=old/...
    txn.commit_transaction()
    assert pyiceberg_ids(table) == Counter([-1, -2])
    # Spark's readers of _spark_metadata could not read those files beside the sink's: refused, nothing written
    _, error = run_query(spark, tmp_path / "in", table, tmp_path / "ckpt0", format="iceberg", partition_by=["p"])
    assert error is not None and "not laid out as the sink lays out its files" in str(error)
    assert pyiceberg_ids(table) == Counter([-1, -2]) and not (table / "_spark_metadata" / "0").exists()
    shutil.rmtree(table)
    storage = open_storage(str(table))
    catalog = target(storage).catalog()
    txn = catalog.create_table_transaction(
        catalog.identifier, schema, location=str(table), partition_spec=spec, properties={"write.data.path": str(table)}
    )
    txn.append(old_rows)  # <table>/p=old/...: as Spark lays out partitions
    txn.commit_transaction()
    _, error = run_query(spark, tmp_path / "in", table, tmp_path / "ckpt", format="iceberg", partition_by=["p"])
    assert error is None
    assert pyiceberg_ids(table) == Counter(ids + [-1, -2])
    assert_exactly_once(spark, table, ids + [-1, -2])  # _spark_metadata names the table's earlier files too
    meta = current_metadata(table)
    ours = [s for s in meta["snapshots"] if "seo.batch-id" in s["summary"]]
    assert len(meta["snapshots"]) == len(ours) + 1  # the table's own snapshot, then one per batch
    assert sorted(int(s["summary"]["seo.batch-id"]) for s in ours) == list(range(len(ours)))
    assert "schema.name-mapping.default" in meta["properties"]  # Spark's files carry no field ids


def test_dataset_sink_outputs_as_iceberg_and_delta_iceberg_tables(spark, tmp_path):
    from streaming_exactly_once import Output
    from tests.delta.readback import delta_ids
    from tests.sink.conftest import stream

    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=5)
    root = tmp_path / "lake"
    sink = DatasetSink(
        str(root),
        outputs=[
            Output("raw", format="iceberg", partition_by=["p"]),
            Output("both", format="delta+iceberg"),
            Output("copy"),
        ],
    )
    query = sink.start(stream(spark, tmp_path / "in", 2), checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
    query.awaitTermination()
    sink.close()
    assert pyiceberg_ids(root / "raw") == pyiceberg_ids(root / "both") == delta_ids(root / "both") == Counter(ids)
    assert sorted(snapshots_by_batch(root / "raw")) == [0, 1]
    every_batch_agrees(root / "raw")
    assert not (root / "copy" / "metadata").exists()
    assert Counter(read.arrow(str(root / "copy")).column("id").to_pylist()) == Counter(ids)
    assert verify_table(open_storage(str(root))).errors == []


def test_iceberg_options_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="iceberg_catalog is an ExactlyOnceSink option"):
        DatasetSink(str(tmp_path / "g"), dataset_column="p", format="iceberg", iceberg_catalog="prod", iceberg_table="db.t")
    with pytest.raises(ConfigError, match="iceberg_table applies to format='iceberg' tables only"):
        ExactlyOnceSink(str(tmp_path / "t"), iceberg_table="db.t")
    with pytest.raises(ConfigError, match="iceberg_catalog and iceberg_table go together"):
        ExactlyOnceSink(str(tmp_path / "t"), format="iceberg", iceberg_catalog="prod")
    with pytest.raises(ConfigError, match="table formats"):
        ExactlyOnceSink(str(tmp_path / "t"), format=["parquet", "iceberg"])
    with pytest.raises(ConfigError, match="add_and_widen"):
        ExactlyOnceSink(str(tmp_path / "t"), format="iceberg", schema_evolution="add_and_widen")
    assert ExactlyOnceSink(str(tmp_path / "t"), format=["iceberg", "delta"]).options.format == "delta+iceberg"
