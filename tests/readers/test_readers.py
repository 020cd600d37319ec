"""Every reader returns exactly the committed rows: orphans, staged and half-written files never show."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming_exactly_once import read
from streaming_exactly_once.errors import (
    DataFileMissingError,
    ManifestEntryOutsideRootError,
    MissingBatchError,
    TableNotFoundError,
    UnsafeReadError,
)
from streaming_exactly_once.manifest.entry import ManifestEntry
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from tests.datagen import PARTITION_VALUES, write_csv_files
from tests.sink.conftest import run_query

REPO = Path(__file__).resolve().parents[2]


def ids_of(table) -> Counter:
    column = table.column("id") if hasattr(table, "column") else table["id"]
    return Counter(column.to_pylist())


def add_noise(table: Path) -> None:
    """What a crashed writer leaves: an orphan, a staged batch and a half-written manifest temp."""
    orphan_dir = table / "p=a b"
    pq.write_table(pa.table({"id": [-1], "v": [0.0]}), orphan_dir / "part-orphan.c000.snappy.parquet")
    staged = table / "_seo" / "staging" / "99-deadbeef" / "data" / "p=plain"
    staged.mkdir(parents=True)
    pq.write_table(pa.table({"id": [-2], "v": [0.0]}), staged / "part-staged.parquet")
    (table / "_spark_metadata" / ".99.0f0f.tmp").write_bytes(b'v1\n{"path":"file:///x","si')


@pytest.fixture(scope="module")
def sink_table(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("readers")
    ids = write_csv_files(base / "in", n_files=12, rows_per_file=5)
    table = base / "events table"
    _, error = run_query(spark, base / "in", table, base / "ckpt", partition_by=["p"], compact_interval=3, files_per_trigger=2)
    assert error is None
    add_noise(table)
    return table, ids


pytestmark = pytest.mark.spark


def test_all_readers_agree_row_for_row(spark, sink_table):
    table, ids = sink_table
    expected = Counter(ids)
    spark_rows = sorted((r.id, r.p, r.v) for r in read.spark(str(table), spark).collect())
    plain_rows = sorted((r.id, r.p, r.v) for r in spark.read.parquet(str(table)).collect())
    arrow_table = read.arrow(str(table))
    arrow_rows = sorted(zip(*(arrow_table.column(c).to_pylist() for c in ("id", "p", "v")), strict=True))
    pdf = read.pandas(str(table))
    pandas_rows = sorted(zip(pdf["id"], pdf["p"], pdf["v"], strict=True))
    pl_df = read.polars(str(table))
    polars_rows = sorted(pl_df.select(["id", "p", "v"]).iter_rows())
    duck_rows = sorted(read.duckdb(str(table)).project("id, p, v").fetchall())
    assert Counter(r[0] for r in spark_rows) == expected
    assert spark_rows == plain_rows == arrow_rows == pandas_rows == polars_rows == duck_rows
    assert {r[1] for r in spark_rows} == set(PARTITION_VALUES)  # space, %, / and é survive
    assert str(arrow_table.schema.field("p").type) == "string" and str(arrow_table.schema.field("id").type) == "int64"
    assert len(read.polars(str(table), lazy=True).collect()) == len(ids)


def test_one_scan_for_every_engine(spark, sink_table):
    """``read.table`` says once what to read; each engine's handle is its method's argument."""
    import duckdb
    import pandas as pd
    import polars as pl
    import pyarrow as pa

    table, ids = sink_table
    scan = read.table(str(table), as_of=None)
    assert isinstance(scan, read.TableScan)
    frames = {
        "arrow": scan.to_arrow(),
        "pandas": scan.to_pandas(),
        "polars": scan.to_polars(),
        "lazy": scan.to_polars(lazy=True),
        "duckdb": scan.to_duckdb(duckdb.connect()),
        "spark": scan.to_spark(spark),
    }
    assert isinstance(frames["arrow"], pa.Table) and isinstance(frames["pandas"], pd.DataFrame)
    assert isinstance(frames["polars"], pl.DataFrame) and isinstance(frames["lazy"], pl.LazyFrame)
    counts = {
        "arrow": frames["arrow"].num_rows,
        "pandas": len(frames["pandas"]),
        "polars": frames["polars"].height,
        "lazy": frames["lazy"].collect().height,
        "duckdb": len(frames["duckdb"].fetchall()),
        "spark": frames["spark"].count(),
    }
    assert set(counts.values()) == {len(ids)}, counts
    assert sorted(scan.files()) == sorted(read.files(str(table)))
    assert dir(read) == sorted(read.__all__) and "arrow_reader" not in dir(read)
    with pytest.warns(DeprecationWarning, match="path first"):
        assert read.spark(spark, str(table)).count() == len(ids)  # the older argument order


def test_files_lists_exactly_the_manifest(sink_table):
    table, _ = sink_table
    uris = read.files(str(table))
    assert not any("orphan" in u or "staging" in u for u in uris)
    assert len(uris) == len(ManifestLog(open_storage(str(table))).files())


def test_as_of_across_compacts_and_batches_listing(spark, sink_table):
    table, ids = sink_table
    history = read.batches(str(table))
    assert [b.batch_id for b in history] == list(range(6)) and all(b.readable for b in history)
    running = 0
    for b in history:
        running += b.num_rows
        assert len(read.arrow(str(table), as_of=b.batch_id)) == running
        assert read.spark(str(table), spark, as_of=b.batch_id).count() == running
    assert "2.compact" in os.listdir(table / "_spark_metadata")


def test_as_of_after_retention(spark, tmp_path):
    ids = write_csv_files(tmp_path / "in", n_files=14, rows_per_file=2)
    table = tmp_path / "t"
    run_query(spark, tmp_path / "in", table, tmp_path / "c", files_per_trigger=1, compact_interval=3, min_batches_to_retain=2, cleanup_delay=0)
    history = read.batches(str(table))
    readable = [b.batch_id for b in history if b.readable]
    assert readable[-1] == 13 and readable[0] > 0  # old snapshots are gone with their log files
    assert len(read.arrow(str(table), as_of=readable[0])) == 2 * (readable[0] + 1)
    assert len(read.arrow(str(table))) == len(ids)
    with pytest.raises(MissingBatchError) as err:
        read.files(str(table), as_of=1)
    assert "as of batch 1" in str(err.value)


def test_partition_sub_path(spark, sink_table):
    table, ids = sink_table
    sub = table / "p=c%25d"
    expected = sorted(i for i in ids if PARTITION_VALUES[i % 4] == "c%d")
    assert sorted(read.arrow(str(sub)).column("id").to_pylist()) == expected
    rows = read.spark(str(sub), spark).collect()
    assert sorted(r.id for r in rows) == expected and {r.p for r in rows} == {"c%d"}
    # plain Spark on a partition directory bypasses the manifest and reads the orphan
    orphan_dir = table / "p=a b"
    plain = {r.id for r in spark.read.option("basePath", str(table)).parquet(str(orphan_dir)).collect()}
    assert -1 in plain and -1 not in {r.id for r in read.spark(str(orphan_dir), spark).collect()}


def test_globs_and_several_paths_are_refused(spark, sink_table):
    table, _ = sink_table
    with pytest.raises(UnsafeReadError, match="glob"):
        read.spark(f"{table}/*", spark)
    with pytest.raises(UnsafeReadError, match="one table path"):
        read.spark([str(table), str(table)], spark)
    with pytest.raises(TableNotFoundError):
        read.files(str(table.parent / "no such table"))


def test_relocated_table(spark, sink_table, tmp_path):
    table, ids = sink_table
    moved = tmp_path / "moved table"
    shutil.copytree(table, moved)
    # the copy's manifest still names the original files: plain Spark reads the *old* location
    plain_files = spark.read.parquet(str(moved)).inputFiles()
    assert plain_files and all("events%20table" in f and "moved%20table" not in f for f in plain_files)
    assert Counter(read.arrow(str(moved)).column("id").to_pylist()) == Counter(ids)
    assert all(str(moved) in u for u in read.files(str(moved)))
    assert sorted(r.id for r in read.spark(str(moved), spark).collect()) == sorted(ids)


def test_outside_root_entry_and_missing_file(tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    log = ManifestLog(storage)
    (table / "p=x").mkdir(parents=True)
    pq.write_table(pa.table({"id": [1]}), table / "p=x" / "a.parquet")
    outside = tmp_path / "elsewhere.parquet"
    pq.write_table(pa.table({"id": [2]}), outside)
    log.add(0, [ManifestEntry.for_file(storage.uri("p=x/a.parquet"), size=os.path.getsize(table / "p=x" / "a.parquet"), modification_time=1)])
    log.add(1, [ManifestEntry.for_file("file://" + str(outside), size=os.path.getsize(outside), modification_time=1)])
    with pytest.raises(ManifestEntryOutsideRootError, match="elsewhere.parquet"):
        read.files(str(table))
    assert sorted(read.arrow(str(table), allow_outside_root=True).column("id").to_pylist()) == [1, 2]
    assert read.files(str(table), as_of=0) == [storage.uri("p=x/a.parquet")]
    os.remove(table / "p=x" / "a.parquet")
    with pytest.raises(DataFileMissingError, match="a.parquet does not exist"):
        read.arrow(str(table), as_of=0)


@pytest.mark.s3
def test_s3_table_copied_from_local_and_native(sink_table, s3_storage, s3_options):
    """Python readers over a real S3 API: a relocated copy, and a table committed on S3 itself."""
    table, ids = sink_table
    fs, root = s3_storage.filesystem()
    fs.put(str(table) + "/", root + "/copy", recursive=True)
    uri = s3_storage.uri("copy")
    assert Counter(read.arrow(uri, storage_options=s3_options).column("id").to_pylist()) == Counter(ids)
    assert Counter(read.pandas(uri, storage_options=s3_options)["id"]) == Counter(ids)
    assert Counter(r[0] for r in read.duckdb(uri, storage_options=s3_options).project("id").fetchall()) == Counter(ids)
    assert all(u.startswith("s3://") for u in read.files(uri, storage_options=s3_options))

    import io

    from streaming_exactly_once.commit.committer import StagedFile
    from tests.commit.helpers import make_committer

    native = s3_storage.child("native")
    c = make_committer(native)
    c.open()
    for batch in range(4):
        attempt = c.begin("44444444-4444-4444-4444-444444444444", batch, mode="direct")
        buf = io.BytesIO()
        pq.write_table(pa.table({"id": list(range(batch * 3, batch * 3 + 3))}), buf)
        final = f"p=é %25/part-{batch}.parquet"
        native.put_if_absent(final, buf.getvalue())
        info = native.info(final)
        c.commit(attempt, [StagedFile(final, info.size, info.mtime_ms)], num_rows=3)
    native.put_if_absent("p=é %25/orphan.parquet", buf.getvalue())
    c.close()
    got = read.arrow(native.root_uri, storage_options=s3_options)
    assert sorted(got.column("id").to_pylist()) == list(range(12))
    assert set(got.column("p").to_pylist()) == {"é %"}
    assert len(read.arrow(native.root_uri, storage_options=s3_options, as_of=1)) == 6


def test_spark_file_sink_tables_read_the_same(spark, tmp_path):
    ids = write_csv_files(tmp_path / "in", n_files=6, rows_per_file=4)
    out = tmp_path / "spark sink"
    q = (
        spark.readStream.schema("id LONG, p STRING, v DOUBLE")
        .option("maxFilesPerTrigger", 2)
        .csv(str(tmp_path / "in"))
        .writeStream.format("parquet")
        .partitionBy("p")
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(availableNow=True)
        .start(str(out))
    )
    q.awaitTermination()
    add_noise(out)
    assert Counter(read.arrow(str(out)).column("id").to_pylist()) == Counter(ids)
    assert sorted(r.id for r in read.spark(str(out), spark).collect()) == sorted(ids)
    assert len(read.arrow(str(out), as_of=0)) == 8


def test_readers_import_without_pyspark(sink_table):
    table, ids = sink_table
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "from streaming_exactly_once import read\n"
        f"print(len(read.arrow({str(table)!r})))\n"
        "try:\n    read.spark('x', None)\nexcept ImportError as e:\n    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == str(len(ids))
    assert "pip install 'streaming-exactly-once[spark]'" in out.stdout


def test_manifest_index_is_used_only_when_it_matches(tmp_path):
    from streaming_exactly_once.manifest.manifest_index import INDEX_DIR, index_path, read_index, write_index
    from tests.commit.helpers import make_committer, stage_and_commit

    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage, compact_interval=3)
    for b in range(7):
        stage_and_commit(c, "55555555-5555-5555-5555-555555555555", b, list(range(b * 4, b * 4 + 4)))
    c.close()  # drains the janitor, which indexed 2.compact and 5.compact
    log = ManifestLog(storage)
    assert read_index(storage, 5, log) is not None
    with_index = read.files(str(tmp_path / "t"))
    storage.delete(index_path(5))
    assert read.files(str(tmp_path / "t")) == with_index  # the same answer from the JSON
    # a stale index (its compact file changed size) is ignored, not trusted
    write_index(storage, 5, log)
    path = tmp_path / "t" / "_spark_metadata" / "5.compact"
    original = path.read_bytes()
    path.write_bytes(original + b"\n" + original.split(b"\n")[1])
    assert read_index(storage, 5, log) is None
    assert len(read.files(str(tmp_path / "t"))) == len(with_index) + 1
    path.write_bytes(original)
    # a garbage index is ignored too
    storage.delete(index_path(5))
    storage.put_if_absent(index_path(5), b"not parquet")
    assert read.files(str(tmp_path / "t")) == with_index
    assert sorted(e.name for e in storage.list_dir(INDEX_DIR)) == ["2.parquet", "5.parquet"]


@pytest.mark.parametrize("damage", ["blank line", "two objects on a line", "a last blank line"])
def test_no_index_for_a_compact_file_the_strict_parser_refuses(tmp_path, damage):
    """Red team (#14): Arrow's JSON reader takes blank lines and two objects on one line; the
    index builder counts lines, so readers never trust an index of a file Spark's rule refuses."""
    from streaming_exactly_once.errors import LogCorruptError
    from streaming_exactly_once.manifest.manifest_index import index_path, write_index
    from tests.commit.helpers import make_committer, stage_and_commit

    storage = open_storage(str(tmp_path / "t"))
    c = make_committer(storage, compact_interval=3)
    for b in range(3):
        stage_and_commit(c, "55555555-5555-5555-5555-555555555555", b, list(range(b * 4, b * 4 + 4)))
    c.close()
    path = tmp_path / "t" / "_spark_metadata" / "2.compact"
    header, first, *rest = path.read_bytes().rstrip(b"\n").split(b"\n")
    damaged = {
        "blank line": [header, first, b"", *rest],
        "two objects on a line": [header, first + first, *rest],
        "a last blank line": [header, first, *rest, b"", b""],
    }[damage]
    path.write_bytes(b"\n".join(damaged))
    storage.delete(index_path(2))
    assert write_index(storage, 2, ManifestLog(storage)) is False
    assert not storage.exists(index_path(2))
    with pytest.raises(LogCorruptError):
        read.files(str(tmp_path / "t"))


def test_an_empty_json_file_of_a_batch_without_rows_reads_as_no_rows(tmp_path):
    """Spark's JSON writer leaves a 0-byte file for a batch whose rows were all filtered out; the
    manifest lists it, vanilla Spark reads it as no rows, and so do the Arrow readers (Arrow's
    JSON reader refused it: "Empty JSON stream")."""
    table = tmp_path / "t"
    storage = open_storage(str(table))
    log = ManifestLog(storage)
    table.mkdir()
    (table / "part-00000-a.json").write_text("")
    (table / "part-00000-b.json").write_text('{"id":1}\n{"id":2}\n')
    for batch, name in enumerate(("part-00000-a.json", "part-00000-b.json")):
        log.add(batch, [ManifestEntry.for_file(storage.uri(name), size=os.path.getsize(table / name), modification_time=1)])
    assert sorted(read.arrow(str(table), format="json").column("id").to_pylist()) == [1, 2]
    assert read.arrow(str(table), format="json", as_of=0).num_rows == 0
