"""The data files of one batch, as the Iceberg commit names them (no pyiceberg needed here).

A file is named by its path relative to the table root exactly as it is on disk (Spark's Hive
escaping of partition values included); the manifest entry holds ``<table location>/<path>``.
Partition values come from the path's ``column=value`` directories, unescaped the way Spark
escaped them; ``__HIVE_DEFAULT_PARTITION__`` (Spark's name for NULL and the empty string) is a
NULL partition value.

The row count comes from the Parquet footer, which also proves, right before the commit names
the file, that it exists and is complete. Only the count is recorded, as for Delta: column
bounds spelled differently from what a reader expects would make it skip files and silently
hide rows, while missing bounds only make it read them.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import IcebergTableError
from ..manifest.paths import parse_partition_dir
from ..storage.base import Storage

_MAGIC = b"PAR1"
_FIRST_READ = 64 * 1024


@dataclass(frozen=True)
class IcebergFile:
    """One data file of a batch: ``path`` relative to the table root, unencoded."""

    path: str
    size: int
    mtime_ms: int
    rows: int | None = None  # from the Parquet footer, filled in right before the commit


def partition_values(path: str, partition_by: Sequence[str], *, table: str) -> dict[str, str | None]:
    found = dict(parse_partition_dir(posixpath.dirname(path)))
    missing = [c for c in partition_by if c not in found]
    if missing:
        raise IcebergTableError(
            f"Data file {table}/{path} has no directory for partition column(s) {missing}; every file of an "
            "Iceberg table partitioned by them must have one. The batch was staged with other partition columns "
            "than the table's; write it again with the table's partition_by.",
            table=table,
            path=path,
        )
    return {c: found[c] for c in partition_by}


def parquet_rows(storage: Storage, path: str) -> int:
    """Rows of the Parquet file at ``path``, from its footer (one read of its last bytes, two for a
    large footer). Refuses a file that is not complete Parquet, or whose timestamps are INT96
    (Spark's default, which Iceberg readers do not read as timestamps: write the table's batches
    with ``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tail = storage.read_tail(path, _FIRST_READ)
    metadata = None
    if len(tail) >= 12 and tail[-4:] == _MAGIC:
        length = int.from_bytes(tail[-8:-4], "little")
        if length + 8 > len(tail):
            tail = storage.read_tail(path, length + 8)
        try:
            metadata = pq.read_metadata(pa.BufferReader(tail[-(length + 8) :]))
        except (OSError, ValueError):
            metadata = None
    if metadata is None:
        raise IcebergTableError(
            f"{storage.uri(path)} is not a complete Parquet file (no footer, or one that does not parse); an Iceberg "
            "table can only name complete data files. The file was truncated or replaced after it was written: "
            "restore it, or discard the pending batch with `seo recover <table> --discard-wal M`.",
            path=path,
        )
    int96 = [metadata.schema.column(i).path for i in range(metadata.num_columns) if metadata.schema.column(i).physical_type == "INT96"]
    if int96:
        raise IcebergTableError(
            f"{storage.uri(path)} stores column(s) {int96} as INT96 timestamps, which Iceberg readers do not read "
            "as timestamps. Set spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS for queries writing "
            "format='iceberg' tables, then discard the pending batch (`seo recover <table> --discard-wal M`) so "
            "that Spark writes it again.",
            path=path,
            columns=int96,
        )
    return int(metadata.num_rows)
