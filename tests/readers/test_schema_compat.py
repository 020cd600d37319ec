"""What each reader family does with Parquet files of one table whose schemas differ - the table
in ``table.schema_rules``, tried here on the project's versions, so that the rules stay true.

Files are named so that the one Spark's inference picks without ``mergeSchema`` (the first by
path) is the older, narrower one - as it is for any table whose first file sorts first.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.spark


def _files(directory, *tables: pa.Table) -> list[str]:
    directory.mkdir()
    paths = []
    for i, table in enumerate(tables):
        path = directory / f"part-{i}.parquet"
        pq.write_table(table, path)
        paths.append(str(path))
    return paths


def _spark(spark, path, *, merge: bool = False, schema: str | None = None):
    """(schema, rows) or the error class Spark names."""
    reader = spark.read.option("mergeSchema", str(merge).lower())
    if schema is not None:
        reader = reader.schema(schema)
    try:
        df = reader.parquet(str(path))
        return df.schema.simpleString(), sorted(tuple(r) for r in df.collect())
    except Exception as exc:  # noqa: BLE001 - the outcome is the error's class
        text = str(exc)
        return next((c for c in ("PARQUET_COLUMN_DATA_TYPE_MISMATCH", "CANNOT_MERGE_SCHEMAS", "FAILED_READ_FILE") if c in text), text[:200])


def test_widened_columns_need_the_schema_given_to_spark(spark, tmp_path):
    old = pa.table({"id": pa.array([1], pa.int32()), "v": pa.array([0.5], pa.float32())})
    new = pa.table({"id": pa.array([2], pa.int64()), "v": pa.array([1.5], pa.float64())})
    files = _files(tmp_path / "t", old, new)
    assert _spark(spark, tmp_path / "t") == "PARQUET_COLUMN_DATA_TYPE_MISMATCH"  # infers int from the first file
    assert _spark(spark, tmp_path / "t", merge=True) == "CANNOT_MERGE_SCHEMAS"  # Spark merges no int/long
    assert _spark(spark, tmp_path / "t", schema="id LONG, v DOUBLE") == ("struct<id:bigint,v:double>", [(1, 0.5), (2, 1.5)])
    wide = pa.schema([("id", pa.int64()), ("v", pa.float64())])
    assert ds.dataset(files, schema=wide).to_table().to_pydict() == {"id": [1, 2], "v": [0.5, 1.5]}  # our Arrow readers
    _raw_engines(files, both=[(1, 0.5), (2, 1.5)])
    short = _files(tmp_path / "s", pa.table({"id": pa.array([1], pa.int16())}), pa.table({"id": pa.array([2], pa.int64())}))
    assert _spark(spark, tmp_path / "s", schema="id LONG")[1] == [(1,), (2,)]  # short -> long too
    assert ds.dataset(short, schema=pa.schema([("id", pa.int64())])).to_table().column("id").to_pylist() == [1, 2]


def test_added_columns_need_merge_schema_or_the_schema_given(spark, tmp_path):
    files = _files(tmp_path / "t", pa.table({"id": [1]}), pa.table({"id": [2], "extra": ["x"]}))
    assert _spark(spark, tmp_path / "t") == ("struct<id:bigint>", [(1,), (2,)])  # the new column is not seen
    expected = ("struct<id:bigint,extra:string>", [(1, None), (2, "x")])
    assert _spark(spark, tmp_path / "t", merge=True) == expected
    assert _spark(spark, tmp_path / "t", schema="id LONG, extra STRING") == expected
    full = pa.schema([("id", pa.int64()), ("extra", pa.string())])
    assert ds.dataset(files, schema=full).to_table().to_pydict() == {"id": [1, 2], "extra": [None, "x"]}
    _raw_engines(files, both=[(1, None), (2, "x")])


def _raw_engines(files: list[str], *, both) -> None:
    """Polars and DuckDB on the files themselves (our readers hand them the Arrow dataset instead)."""
    import duckdb
    import polars as pl

    with pytest.raises(pl.exceptions.PolarsError):
        pl.scan_parquet(files).collect()
    assert sorted(duckdb.sql(f"select * from read_parquet({files!r}, union_by_name=true)").fetchall()) == both


def test_a_changed_type_is_read_by_no_reader_as_it_was_written(spark, tmp_path):
    files = _files(tmp_path / "t", pa.table({"id": pa.array([1], pa.int64())}), pa.table({"id": ["x"]}))
    assert _spark(spark, tmp_path / "t") == "PARQUET_COLUMN_DATA_TYPE_MISMATCH"
    assert _spark(spark, tmp_path / "t", merge=True) == "CANNOT_MERGE_SCHEMAS"
    assert _spark(spark, tmp_path / "t", schema="id LONG") == "PARQUET_COLUMN_DATA_TYPE_MISMATCH"
    with pytest.raises(pa.ArrowInvalid):  # Arrow casts what parses ("3") and fails on the rest
        ds.dataset(files, schema=pa.schema([("id", pa.int64())])).to_table()
    _raw_engines(files, both=[("1",), ("x",)])  # DuckDB unifies to string
