"""pandas, Polars and DuckDB over the committed-files Arrow dataset (one source of truth)."""

from __future__ import annotations

from typing import Any

from ..errors import MissingDependencyError
from .arrow_reader import arrow, dataset


def pandas(path: str, **kwargs: Any) -> Any:
    """The committed rows as a ``pandas.DataFrame`` (partition columns typed as recorded)."""
    try:
        import pandas  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(package="pandas", extra="arrow", feature="read.pandas") from exc
    return arrow(path, **kwargs).to_pandas()


def polars(path: str, *, lazy: bool = False, **kwargs: Any) -> Any:
    """A ``polars.DataFrame`` (or ``LazyFrame`` with ``lazy=True``, scanning the Arrow dataset)."""
    try:
        import polars as pl
    except ImportError as exc:
        raise MissingDependencyError(package="polars", extra="polars", feature="read.polars") from exc
    if lazy:
        return pl.scan_pyarrow_dataset(dataset(path, **kwargs))
    return pl.from_arrow(arrow(path, **kwargs))


def duckdb(path: str, con: Any = None, *, name: str = "seo_table", **kwargs: Any) -> Any:
    """A DuckDB relation over the committed files, registered in ``con`` as view ``name``.

    DuckDB scans the Arrow dataset directly (projection and filter pushdown included), which
    reads through the table's fsspec filesystem: S3 works without DuckDB's httpfs extension.
    """
    try:
        import duckdb as ddb
    except ImportError as exc:
        raise MissingDependencyError(package="duckdb", extra="duckdb", feature="read.duckdb") from exc
    con = con if con is not None else ddb.connect()
    con.register(name, dataset(path, **kwargs))
    return con.table(name)
