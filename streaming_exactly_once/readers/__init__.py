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


def spark(session: SparkSession, path: str, **kwargs: Any) -> DataFrame:
    from .spark_reader import spark as _spark

    return _spark(session, path, **kwargs)


def dataset(path: str, **kwargs: Any) -> Any:
    from .arrow_reader import dataset as _dataset

    return _dataset(path, **kwargs)


def arrow(path: str, **kwargs: Any) -> Any:
    from .arrow_reader import arrow as _arrow

    return _arrow(path, **kwargs)


def pandas(path: str, **kwargs: Any) -> Any:
    from .engines import pandas as _pandas

    return _pandas(path, **kwargs)


def polars(path: str, **kwargs: Any) -> Any:
    from .engines import polars as _polars

    return _polars(path, **kwargs)


def duckdb(path: str, con: Any = None, **kwargs: Any) -> Any:
    from .engines import duckdb as _duckdb

    return _duckdb(path, con, **kwargs)


__all__ = [
    "BatchInfo", "CommittedFiles", "arrow", "batches", "committed_files", "dataset", "delta_version", "duckdb", "files",
    "pandas", "polars", "spark",
]
