"""``read.table(path, as_of=...)``: one table as of one batch, handed to any engine.

The shape pyiceberg's and delta-rs' users know (``table.scan().to_arrow()``,
``DeltaTable(path).to_pandas()``): what to read is said once, then each ``to_*`` method gives it
to an engine, whose handle (a SparkSession, a DuckDB connection) is that method's argument. Every
engine reads exactly the committed files (``readers.visibility``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .arrow_reader import arrow, dataset
from .committed_files import CommittedFiles
from .engines import duckdb, pandas, polars
from .spark_reader import spark
from .visibility import committed_files

if TYPE_CHECKING:
    import duckdb as duckdb_module
    import pandas as pd
    import polars as pl
    import pyarrow as pa
    import pyarrow.dataset as pads
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class TableScan:
    """The committed rows of the table at ``path`` as of batch ``as_of`` (default: the latest).

    ``storage_options``: the table's storage backend (e.g. an S3 endpoint and credentials);
    ``allow_outside_root``: accept manifest entries outside the table's root (Spark does);
    ``format``/``options``: the data files' format and reader options (default: what the table
    recorded)."""

    path: str
    as_of: int | None = None
    storage_options: Mapping[str, Any] | None = None
    allow_outside_root: bool = False
    format: str | None = None
    options: Mapping[str, str] | None = field(default=None)

    def _where(self) -> dict[str, Any]:
        return {
            "as_of": self.as_of,
            "storage_options": self.storage_options,
            "allow_outside_root": self.allow_outside_root,
            "format": self.format,
            "options": self.options,
        }

    def files(self) -> list[str]:
        """URIs of the committed data files."""
        return self.committed().uris()

    def committed(self) -> CommittedFiles:
        """The committed data files with their sizes, the table's schema and partition columns."""
        return committed_files(self.path, as_of=self.as_of, storage_options=self.storage_options, allow_outside_root=self.allow_outside_root)

    def to_dataset(self) -> pads.Dataset:
        """A ``pyarrow.dataset.Dataset`` over exactly the committed files."""
        return dataset(self.path, **self._where())

    def to_arrow(self, *, columns: list[str] | None = None, filter: Any = None) -> pa.Table:
        """A ``pyarrow.Table`` (``filter``: a ``pyarrow.dataset`` expression)."""
        return arrow(self.path, **self._where(), columns=columns, filter=filter)

    def to_pandas(self, *, columns: list[str] | None = None, filter: Any = None) -> pd.DataFrame:
        """A ``pandas.DataFrame`` (partition columns typed as recorded)."""
        return pandas(self.path, **self._where(), columns=columns, filter=filter)

    def to_polars(self, *, lazy: bool = False, columns: list[str] | None = None, filter: Any = None) -> pl.DataFrame | pl.LazyFrame:
        """A ``polars.DataFrame``, or a ``LazyFrame`` scanning the files with ``lazy=True``."""
        return polars(self.path, lazy=lazy, **self._where(), columns=columns, filter=filter)

    def to_duckdb(self, con: duckdb_module.DuckDBPyConnection | None = None, *, name: str = "seo_table") -> duckdb_module.DuckDBPyRelation:
        """A DuckDB relation, registered in ``con`` (a new connection if None) as view ``name``."""
        return duckdb(self.path, con, name=name, **self._where())

    def to_spark(self, session: SparkSession) -> DataFrame:
        """A Spark DataFrame read with ``session``."""
        return spark(self.path, session, **self._where())


def table(
    path: str,
    *,
    as_of: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_outside_root: bool = False,
    format: str | None = None,
    options: Mapping[str, str] | None = None,
) -> TableScan:
    """The table at ``path`` as of batch ``as_of``, for any engine (``TableScan``)::

    scan = read.table("s3://lake/events", as_of=120, storage_options=creds)
    scan.to_arrow(); scan.to_pandas(); scan.to_polars(lazy=True)
    scan.to_duckdb(con); scan.to_spark(spark); scan.files()
    """
    return TableScan(path, as_of, storage_options, allow_outside_root, format, options)
