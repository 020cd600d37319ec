"""The data files of one batch, as the Iceberg commit names them (no pyiceberg needed here).

A file is named by its path relative to the table root exactly as it is on disk (Spark's Hive
escaping of partition values included); the manifest entry holds ``<table location>/<path>``.
Partition values come from the path's ``column=value`` directories, unescaped the way Spark
escaped them; ``__HIVE_DEFAULT_PARTITION__`` (Spark's name for NULL and the empty string) is a
NULL partition value.

The row count comes from the Parquet footer, read before the WAL claim (``staged_rows``, which
refuses a file the commit could not name while nothing is written) and again by a roll-forward
(``parquet_rows``), which proves, right before the commit names the file, that it exists and is
complete. Only the count is recorded, as for Delta: column
bounds spelled differently from what a reader expects would make it skip files and silently
hide rows, while missing bounds only make it read them.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import IcebergTableError
from ..manifest.paths import parse_partition_dir
from ..storage.base import Storage
from ..storage.parquet_footer import read_footer


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


#: The Spark setting that makes Spark's Parquet writer store timestamps as Iceberg reads them.
OUTPUT_TIMESTAMP_TYPE = "spark.sql.parquet.outputTimestampType"
#: Its value for the files of an Iceberg table (Iceberg's own timestamp layout: INT64 microseconds).
ICEBERG_TIMESTAMPS = "TIMESTAMP_MICROS"


def _int96_columns(metadata: Any) -> list[str]:
    return [metadata.schema.column(i).path for i in range(metadata.num_columns) if metadata.schema.column(i).physical_type == "INT96"]


def staged_rows(storage: Storage, path: str, *, table: str) -> int:
    """Before the WAL claim: rows of a batch's data file at ``path`` (staged or in place), from
    its footer - refusing, while nothing is written, a file the Iceberg commit could not name:
    not complete Parquet, or with INT96 timestamps (Spark's default; Iceberg readers read
    timestamps as INT64: pyiceberg reads INT96 as nanoseconds, wrong before 1677 and after 2262)."""
    metadata = read_footer(storage, path)
    if metadata is None:
        raise IcebergTableError(
            f"Data file {storage.uri(path)} of this batch is not a complete Parquet file, although its writer finished; "
            f"the Iceberg table {table} can only name complete ones. Nothing was published: the batch fails, and Spark "
            "writes it again when the query restarts.",
            table=table,
            path=path,
        )
    int96 = _int96_columns(metadata)
    if int96:
        raise IcebergTableError(
            f"Data file {storage.uri(path)} of this batch stores column(s) {int96} as INT96 timestamps, which Iceberg "
            f"readers do not read as timestamps; the Iceberg table {table} takes {ICEBERG_TIMESTAMPS} only. The sink "
            f"writes with the writer option {OUTPUT_TIMESTAMP_TYPE}={ICEBERG_TIMESTAMPS}, which this Spark ignored. "
            f"Nothing was published: set it in the query's session (spark.conf.set('{OUTPUT_TIMESTAMP_TYPE}', "
            f"'{ICEBERG_TIMESTAMPS}')) and restart the query; Spark writes the batch again.",
            table=table,
            path=path,
            columns=int96,
        )
    return int(metadata.num_rows)


def parquet_rows(storage: Storage, path: str, *, accept_int96: bool = False) -> int:
    """After the WAL claim (the ``iceberg`` step, in a roll-forward too): rows of the Parquet
    file at ``path``, from its footer (one read of its last bytes, two for a large footer),
    which also proves the file is there and complete. The batch is published in the manifest
    by then, so it cannot be discarded: the way out of each refusal is named in its message.
    ``accept_int96``: a person's decision (``seo recover --accept-int96``) to name INT96 files
    of a batch published before the check moved ahead of the claim."""
    metadata = read_footer(storage, path)
    if metadata is None:
        raise IcebergTableError(
            f"{storage.uri(path)} is not a complete Parquet file (no footer, or one that does not parse); an Iceberg "
            "table can only name complete data files. Its batch is published in the table's manifest already, so "
            "it cannot be discarded: the file was truncated or replaced after it was committed there. Restore it "
            "from a backup, then restart the query or run `seo recover <table>`.",
            path=path,
        )
    int96 = _int96_columns(metadata)
    if int96 and not accept_int96:
        raise IcebergTableError(
            f"{storage.uri(path)} stores column(s) {int96} as INT96 timestamps (written before this release checked "
            "them ahead of the batch's claim). Its batch is published in the table's manifest already, so it cannot "
            "be discarded. Run `seo recover <table> --accept-int96` to commit it to the Iceberg table with these "
            "files as they are: Spark's Iceberg readers read INT96, pyiceberg reads it as nanoseconds (timestamps "
            "before 1677-09-21 or after 2262-04-11 come out wrong there). Later batches are written as "
            f"{ICEBERG_TIMESTAMPS}.",
            path=path,
            columns=int96,
        )
    return int(metadata.num_rows)
