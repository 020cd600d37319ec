"""Manifest-aware readers: every engine sees exactly the committed files, as of any retained batch.

    from streaming_exactly_once import read
    read.files("s3://bucket/events")                 # committed data file URIs, latest batch
    read.spark(spark, "file:///data/events", as_of=120)
    read.arrow(...), read.pandas(...), read.polars(...), read.duckdb(..., con)
    read.batches(...)                                # history: rows, files, commit time per batch
    read.delta_version(path, as_of=120)              # format="delta": the Delta version of batch 120

Importing this module needs neither pyspark nor pyarrow; each reader says which extra to
install when its engine is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .history import BatchInfo, batches
from .visibility import CommittedFiles, committed_files, delta_version

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def files(
    path: str,
    *,
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    verify: bool = False,
) -> list[str]:
    """URIs of the committed data files as of batch ``as_of`` (default: latest)."""
    return committed_files(path, as_of=as_of, storage_options=storage_options, allow_outside_root=allow_outside_root, verify=verify).uris()


def spark(
    session: SparkSession,
    path: str,
    *,
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    format: str | None = None,
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """A Spark DataFrame of exactly the committed rows of ``path`` as of batch ``as_of``.

    Args:
        session: the SparkSession to read with.
        path: the table's URI or path.
        as_of: a retained batch id (default: the latest committed batch).
        storage_options: options of the table's storage backend (e.g. S3 endpoint, credentials).
        allow_outside_root: accept manifest entries outside the table's root (Spark allows them).
        format: the data files' format (default: the one recorded in the table).
        options: reader options (default: the writer options recorded in the table).
    """
    from .spark_reader import spark as _spark

    return _spark(session, path, as_of=as_of, storage_options=storage_options, allow_outside_root=allow_outside_root, format=format, options=options)


def dataset(
    path: str,
    *,
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    format: str | None = None,
    options: Mapping[str, str] | None = None,
) -> Any:
    """A ``pyarrow.dataset.Dataset`` of exactly the committed files (arguments as in ``spark``)."""
    from .arrow_reader import dataset as _dataset

    return _dataset(path, as_of=as_of, storage_options=storage_options, allow_outside_root=allow_outside_root, format=format, options=options)


def arrow(
    path: str,
    *,
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    format: str | None = None,
    options: Mapping[str, str] | None = None,
    columns: list[str] | None = None,
    filter: Any = None,
) -> Any:
    """The committed rows as one ``pyarrow.Table``; ``columns`` and ``filter`` (a
    ``pyarrow.dataset`` expression) as in ``Dataset.to_table``, the rest as in ``spark``."""
    from .arrow_reader import arrow as _arrow

    return _arrow(
        path, as_of=as_of, storage_options=storage_options, allow_outside_root=allow_outside_root, format=format,
        options=options, columns=columns, filter=filter,
    )


def pandas(
    path: str,
    *,
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    format: str | None = None,
    options: Mapping[str, str] | None = None,
    columns: list[str] | None = None,
    filter: Any = None,
) -> Any:
    """The committed rows as a ``pandas.DataFrame`` (arguments as in ``arrow``)."""
    from .engines import pandas as _pandas

    return _pandas(
        path, as_of=as_of, storage_options=storage_options, allow_outside_root=allow_outside_root, format=format,
        options=options, columns=columns, filter=filter,
    )


def polars(
    path: str,
    *,
    lazy: bool = False,
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    format: str | None = None,
    options: Mapping[str, str] | None = None,
    columns: list[str] | None = None,
    filter: Any = None,
) -> Any:
    """A ``polars.DataFrame``, or with ``lazy=True`` a ``LazyFrame`` scanning the Arrow dataset
    (``filter`` applies to eager reads only); the rest as in ``arrow``."""
    from .engines import polars as _polars

    return _polars(
        path, lazy=lazy, as_of=as_of, storage_options=storage_options, allow_outside_root=allow_outside_root,
        format=format, options=options, columns=columns, filter=filter,
    )


def duckdb(
    path: str,
    con: Any = None,
    *,
    name: str = "seo_table",
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    format: str | None = None,
    options: Mapping[str, str] | None = None,
) -> Any:
    """A DuckDB relation over the committed files, registered in ``con`` (default: a new
    connection) as view ``name``; the rest as in ``spark``."""
    from .engines import duckdb as _duckdb

    return _duckdb(
        path, con, name=name, as_of=as_of, storage_options=storage_options, allow_outside_root=allow_outside_root,
        format=format, options=options,
    )


__all__ = [
    "BatchInfo", "CommittedFiles", "arrow", "batches", "committed_files", "dataset", "delta_version", "duckdb", "files",
    "pandas", "polars", "spark",
]
