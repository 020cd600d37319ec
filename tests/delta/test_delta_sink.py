"""``ExactlyOnceSink(format="delta")`` with real streaming queries (local[2]).

Delta readers are delta-rs and polars - no Spark, no Delta jars - and the manifest readers are
vanilla ``spark.read.parquet`` and ours; all of them must see every input id exactly once.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter

import pytest

from streaming_exactly_once import DatasetSink, ExactlyOnceSink, Output, read
from streaming_exactly_once.errors import ConfigError, DeltaSchemaMismatchError
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from tests.datagen import PARTITION_VALUES, write_csv_files
from tests.delta.readback import batch_commits, delta_commits, delta_ids
from tests.sink.conftest import assert_exactly_once, assert_table_clean, run_query, stream

pytestmark = pytest.mark.spark


def polars_ids(table, storage_options=None, *, use_pyarrow=False) -> Counter:
    import polars as pl

    frame = pl.read_delta(str(table), storage_options=storage_options, use_pyarrow=use_pyarrow)
    return Counter(frame.get_column("id").to_list())


@pytest.mark.parametrize("mode", ["rename", "direct"])
def test_stream_to_delta_every_row_once_for_every_reader(spark, tmp_path, mode):
    ids = write_csv_files(tmp_path / "in", n_files=7, rows_per_file=12)
    # no space in the root: polars 2.1's native Delta reader fails on one (it reads "out%20table")
    table = tmp_path / "out_table"
    sink, error = run_query(spark, tmp_path / "in", table, tmp_path / "ckpt", format="delta", partition_by=["p"], staging_mode=mode)
    assert error is None
    assert sink.counters["committed"] == 4
    expected = Counter(ids)
    assert delta_ids(table) == expected  # delta-rs: the Delta log alone
    assert polars_ids(table) == expected
    assert_exactly_once(spark, table, ids)  # vanilla Spark through _spark_metadata
    assert_table_clean(table)
    assert batch_commits(table) == {b: b for b in range(4)}  # one Delta commit per batch, with our txn
    from deltalake import DeltaTable

    rows = DeltaTable(str(table)).to_pyarrow_table(columns=["id", "p"]).to_pylist()
    assert {r["id"]: r["p"] for r in rows} == {i: PARTITION_VALUES[i % 4] for i in ids}  # 'a b', 'c%d', 'é/ü' survive
    assert delta_ids(table, version=1) == Counter(read.arrow(str(table), as_of=1).column("id").to_pylist())
    assert verify_table(open_storage(str(table))).problems == []


def test_replay_and_recreated_checkpoint_add_no_delta_commit_and_no_row(spark, tmp_path):
    first = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=6)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    run_query(spark, tmp_path / "in", table, ckpt, format="delta", partition_by=["p"])
    versions = len(delta_commits(table))
    last = max(int(n) for n in os.listdir(ckpt / "commits") if n.isdigit())
    os.remove(ckpt / "commits" / str(last))  # Spark replays its last batch
    if (ckpt / "commits" / f".{last}.crc").exists():
        os.remove(ckpt / "commits" / f".{last}.crc")  # Hadoop's checksum file, or Spark cannot write commits/N again
    sink, error = run_query(spark, tmp_path / "in", table, ckpt, format="delta", partition_by=["p"])
    assert error is None and sink.counters["duplicates"] == 1
    assert len(delta_commits(table)) == versions and delta_ids(table) == Counter(first)
    shutil.rmtree(ckpt)  # checkpoint lost: every file is read again, with new ones
    second = write_csv_files(tmp_path / "in", n_files=2, rows_per_file=6, start_file=4)
    sink, error = run_query(spark, tmp_path / "in", table, ckpt, format="delta", partition_by=["p"], files_per_trigger=6)
    assert error is None and sink.counters["skipped_rows"] == len(first)
    assert delta_ids(table) == Counter(first + second)
    assert polars_ids(table) == Counter(first + second)
    assert_exactly_once(spark, table, first + second)
    assert sorted(batch_commits(table)) == list(range(3))


@pytest.mark.parametrize("boundary", ["after-manifest", "after-delta"])
def test_failure_around_the_delta_commit_then_restart(spark, tmp_path, monkeypatch, boundary):
    ids = write_csv_files(tmp_path / "in", n_files=6, rows_per_file=5)
    table, ckpt = tmp_path / "t", tmp_path / "ckpt"
    monkeypatch.setenv("SEO_FAIL_AT", f"{boundary}@2")
    _, error = run_query(spark, tmp_path / "in", table, ckpt, format="delta", partition_by=["p"])
    assert error is not None and "injected failure" in str(error)
    monkeypatch.delenv("SEO_FAIL_AT")
    _, error = run_query(spark, tmp_path / "in", table, ckpt, format="delta", partition_by=["p"])
    assert error is None
    assert delta_ids(table) == Counter(ids)
    assert_exactly_once(spark, table, ids)
    assert sorted(batch_commits(table)) == list(range(3))


def test_existing_delta_table_with_another_schema_fails_the_query_with_a_named_error(spark, tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    write_csv_files(tmp_path / "in", n_files=2, rows_per_file=4)
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": pa.array([1], pa.int64()), "p": ["x"], "v": ["text"]}), partition_by=["p"])
    # the stream's schema is judged at start(), against the Delta log's: the query never runs
    with pytest.raises(DeltaSchemaMismatchError, match="column 'v' is double in the batch, string in the table"):
        run_query(spark, tmp_path / "in", table, tmp_path / "ckpt", format="delta", partition_by=["p"])
    assert not (tmp_path / "ckpt" / "offsets").exists()
    # a batch handed to the sink directly (foreachBatch without start) is refused the same way
    sink = ExactlyOnceSink(str(table), format="delta", partition_by=["p"], query_id="3b8f9d8e-0000-4000-8000-00000000000d")
    with pytest.raises(DeltaSchemaMismatchError, match="column 'v' is double in the batch, string in the table"):
        sink(spark.createDataFrame([(2, "y", 0.5)], "id LONG, p STRING, v DOUBLE"), 0)
    sink.close()
    assert DeltaTable(str(table)).version() == 0 and delta_ids(table) == Counter([1])


def test_existing_delta_table_is_appended_to_and_keeps_its_rows(spark, tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=5)
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": pa.array([-1, -2], pa.int64()), "p": ["old", "a b"], "v": [0.5, 1.5]}), partition_by=["p"])
    _, error = run_query(spark, tmp_path / "in", table, tmp_path / "ckpt", format="delta", partition_by=["p"])
    assert error is None
    assert delta_ids(table) == Counter(ids + [-1, -2])
    assert_exactly_once(spark, table, ids + [-1, -2])  # _spark_metadata names the table's earlier files too


def test_spark_manifest_off_leaves_delta_as_the_only_public_log(spark, tmp_path):
    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=5)
    table = tmp_path / "t"
    _, error = run_query(spark, tmp_path / "in", table, tmp_path / "ckpt", format="delta", partition_by=["p"], spark_manifest=False)
    assert error is None
    assert not (table / "_spark_metadata").exists()
    assert delta_ids(table) == Counter(ids) == Counter(read.arrow(str(table)).column("id").to_pylist())
    with pytest.raises(ConfigError, match="applies to format='delta' or 'iceberg' tables only"):
        ExactlyOnceSink(str(tmp_path / "u"), spark_manifest=False)


def test_dataset_sink_output_as_a_delta_table(spark, tmp_path):
    ids = write_csv_files(tmp_path / "in", n_files=4, rows_per_file=5)
    root = tmp_path / "lake"
    sink = DatasetSink(str(root), outputs=[Output("raw", format="delta", partition_by=["p"]), Output("copy")])
    query = sink.start(stream(spark, tmp_path / "in", 2), checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True})
    query.awaitTermination()
    sink.close()
    assert delta_ids(root / "raw") == Counter(ids)
    assert sorted(batch_commits(root / "raw")) == [0, 1]
    assert not (root / "copy" / "_delta_log").exists()
    assert Counter(read.arrow(str(root / "copy")).column("id").to_pylist()) == Counter(ids)


@pytest.mark.s3
def test_delta_table_on_s3_end_to_end(spark, tmp_path, s3_bucket, s3_options):
    from streaming_exactly_once.delta.engine import object_store_options

    ids = write_csv_files(tmp_path / "in", n_files=5, rows_per_file=6)
    table = f"s3://{s3_bucket}/events"
    sink, error = run_query(spark, tmp_path / "in", table, tmp_path / "ckpt", format="delta", partition_by=["p"], storage_options=s3_options)
    assert error is None and sink.staging_mode == "direct"
    delta_options = object_store_options(open_storage(table, s3_options))
    assert delta_ids(table, storage_options=delta_options) == Counter(ids)
    # polars 2.1's native reader asks S3 for the add path still URL-encoded ("p=a%20b/..." for the
    # directory "p=a b"), a 404; through delta-rs's dataset (use_pyarrow) it reads the table right
    assert polars_ids(table, storage_options=delta_options, use_pyarrow=True) == Counter(ids)
    assert Counter(read.arrow(table, storage_options=s3_options).column("id").to_pylist()) == Counter(ids)
    import json

    from deltalake import DeltaTable

    app = json.loads(open_storage(table, s3_options).read_bytes("_seo/table").decode().splitlines()[1])["delta"]["appId"]
    dt = DeltaTable(table, storage_options=delta_options)
    assert dt.version() == 2  # three batches, three Delta versions; each one's txn names its batch
    assert [DeltaTable(table, version=v, storage_options=delta_options).transaction_version(app) for v in range(3)] == [0, 1, 2]
    assert read.delta_version(table, as_of=1, storage_options=s3_options) == 1
    assert verify_table(open_storage(table, s3_options)).problems == []
