"""Manifest-aware readers: every engine sees exactly the committed files, as of any retained batch.

    from streaming_exactly_once import read
    scan = read.table("s3://bucket/events", as_of=120, storage_options=creds)
    scan.to_arrow(); scan.to_pandas(); scan.to_polars(lazy=True); scan.to_duckdb(con); scan.to_spark(spark)
    read.files(path)                                 # committed data file URIs
    read.batches(path)                               # history: rows, files, commit time per batch
    read.delta_version(path, as_of=120)              # format="delta": the Delta version of batch 120
    read.iceberg_snapshot(path, as_of=120)           # format="iceberg": the Iceberg snapshot of batch 120
    read.schema(path, as_of=120)                     # the table's Spark schema (JSON) as of batch 120

``read.arrow/pandas/polars/duckdb/spark(path, ...)`` are the same as ``read.table(path, ...).to_*``:
every reader takes the table's path first, then an engine's handle where it needs one, then
``as_of``, ``storage_options``, ``allow_outside_root``, ``format`` and ``options`` by name.
Importing this module needs neither pyspark nor pyarrow; each reader says which extra to
install when its engine is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .arrow_reader import arrow, dataset
from .batch_schema import table_schema as schema
from .committed_files import CommittedFiles
from .delta_versions import delta_version
from .engines import duckdb, pandas, polars
from .history import BatchInfo, batches
from .iceberg_snapshots import iceberg_snapshot
from .scan import TableScan, table
from .spark_reader import spark
from .visibility import committed_files


def files(
    path: str,
    *,
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    verify: bool = False,
) -> list[str]:
    """URIs of the committed data files as of batch ``as_of`` (default: latest)."""
    return committed_files(path, as_of=as_of, storage_options=storage_options, allow_outside_root=allow_outside_root, verify=verify).pop_uris()


__all__ = [
    "BatchInfo",
    "CommittedFiles",
    "TableScan",
    "arrow",
    "batches",
    "committed_files",
    "dataset",
    "delta_version",
    "duckdb",
    "files",
    "iceberg_snapshot",
    "pandas",
    "polars",
    "schema",
    "spark",
    "table",
]


def __dir__() -> list[str]:
    """The reading API only, not the modules that implement it."""
    return sorted(__all__)
