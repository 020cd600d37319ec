"""pandas, Polars and DuckDB over the committed-files Arrow dataset (one source of truth).

Every reader takes the arguments of ``arrow_reader.dataset`` (``as_of``, ``storage_options``,
``allow_outside_root``, ``format``, ``options``) by name, plus its engine's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import extras
from ..errors import ConfigError
from .arrow_reader import arrow, dataset

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl
    from duckdb import DuckDBPyConnection, DuckDBPyRelation


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
) -> pd.DataFrame:
    """The committed rows as a ``pandas.DataFrame`` (partition columns typed as recorded)."""
    extras.require("pandas")
    return arrow(
        path,
        as_of=as_of,
        storage_options=storage_options,
        allow_outside_root=allow_outside_root,
        format=format,
        options=options,
        columns=columns,
        filter=filter,
    ).to_pandas()


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
) -> pl.DataFrame | pl.LazyFrame:
    """A ``polars.DataFrame`` (or ``LazyFrame`` with ``lazy=True``, scanning the Arrow dataset).

    ``columns`` selects columns either way; ``filter`` (a ``pyarrow.dataset`` expression) applies
    to eager reads only - filter a ``LazyFrame`` with Polars expressions."""
    extras.require("polars")
    import polars as pl

    if lazy:
        if filter is not None:
            raise ConfigError("read.polars(lazy=True) takes no pyarrow filter; filter the LazyFrame instead", key="filter")
        data = dataset(
            path,
            as_of=as_of,
            storage_options=storage_options,
            allow_outside_root=allow_outside_root,
            format=format,
            options=options,
        )
        frame = pl.scan_pyarrow_dataset(data)
        return frame.select(columns) if columns is not None else frame
    eager = pl.from_arrow(
        arrow(
            path,
            as_of=as_of,
            storage_options=storage_options,
            allow_outside_root=allow_outside_root,
            format=format,
            options=options,
            columns=columns,
            filter=filter,
        )
    )
    assert isinstance(eager, pl.DataFrame)  # from a table, never a Series
    return eager


def duckdb(
    path: str,
    con: DuckDBPyConnection | None = None,
    *,
    name: str = "seo_table",
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    format: str | None = None,
    options: Mapping[str, str] | None = None,
) -> DuckDBPyRelation:
    """A DuckDB relation over the committed files, registered in ``con`` as view ``name``.

    DuckDB scans the Arrow dataset directly (projection and filter pushdown included), which
    reads through the table's fsspec filesystem: S3 works without DuckDB's httpfs extension.
    """
    extras.require("duckdb")
    import duckdb as ddb

    connection = con if con is not None else ddb.connect()
    data = dataset(path, as_of=as_of, storage_options=storage_options, allow_outside_root=allow_outside_root, format=format, options=options)
    connection.register(name, data)
    return connection.table(name)
