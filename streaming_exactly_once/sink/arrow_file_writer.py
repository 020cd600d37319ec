"""Writing Arrow record batches to data files from inside Spark tasks (``mapInArrow``).

Used where the sink writes files itself instead of through Spark's writer: ``direct`` staging
(final names, object stores) and dataset groups (one pass routes each row to its table, its
partition directory or quarantine, and counts what the quality checks need). Formats: parquet,
csv, json lines; partition values are named the way Spark names them.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from ..errors import ConfigError
from ..storage.base import Storage

if TYPE_CHECKING:  # imported where used: a task imports pyarrow only when it writes
    import pyarrow as pa

_PARTITION_TYPES = (T.StringType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.BooleanType, T.DateType)
#: What ``DataFrame.mapInArrow`` runs in each task: record batches in, result rows out.
ArrowTask = Callable[[Iterator["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]

#: A task's result rows: (column, Spark type) - ``string`` or ``long``. One definition gives both
#: the DDL string ``mapInArrow`` is declared with and the Arrow schema the task yields.
ResultFields = tuple[tuple[str, str], ...]


def result_ddl(fields: ResultFields) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in fields)


def result_batch(fields: ResultFields, columns: Mapping[str, list[Any]]) -> pa.RecordBatch:
    """The task's result rows as one Arrow batch, typed as ``result_ddl`` declares them."""
    import pyarrow as pa

    types = {"string": pa.string(), "long": pa.int64()}
    return pa.RecordBatch.from_pydict(dict(columns), schema=pa.schema([(name, types[kind]) for name, kind in fields]))


EXTENSIONS = {"parquet": ".c000.snappy.parquet", "csv": ".c000.csv", "json": ".c000.json"}


def partition_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def json_value(value: Any) -> Any:
    """A value as JSON can hold it: dates and times in ISO 8601, decimals as text, bytes as hex."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


def _json_default(value: Any) -> Any:
    out = json_value(value)
    return str(out) if out is value else out


class FileSink:
    """One open output file of a task."""

    def __init__(self, storage: Storage, final: str, fmt: str, schema: pa.Schema, options: Mapping[str, str]) -> None:
        import pyarrow as pa

        self.final = final
        self.rows = 0
        self.fmt = fmt
        self.fh = storage.open_write(final)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            self.writer = pq.ParquetWriter(self.fh, schema, compression=options.get("compression", "snappy"))
        elif fmt == "csv":
            import pyarrow.csv as pacsv

            header = str(options.get("header", "false")).lower() == "true"
            delimiter = options.get("sep", options.get("delimiter", ","))
            self.writer = pacsv.CSVWriter(
                self.fh, schema, write_options=pacsv.WriteOptions(include_header=header, delimiter=delimiter, quoting_style="needed")
            )
        else:
            self.writer = None
        self._pa = pa

    def write(self, table: pa.Table) -> None:
        self.rows += table.num_rows
        if self.fmt == "json":
            lines = (json.dumps(row, default=_json_default, ensure_ascii=False, separators=(",", ":")) for row in table.to_pylist())
            self.fh.write(("\n".join(lines) + "\n").encode("utf-8"))
        else:
            self.writer.write_table(table)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.fh.close()



def split_by(table: pa.Table, columns: tuple[str, ...]) -> Iterator[tuple[dict[str, Any], pa.Table]]:
    """(values of ``columns``, the rows with those values) for each distinct combination."""
    import pyarrow.compute as pc

    if not columns:
        yield {}, table
        return
    keys = table.select(list(columns)).group_by(list(columns)).aggregate([])
    for key in keys.to_pylist():
        mask = None
        for column in columns:
            value = key[column]
            cond = pc.is_null(table[column]) if value is None else pc.equal(table[column], value)
            mask = cond if mask is None else pc.and_(mask, cond)
        yield key, table.filter(mask)


def check_partition_types(schema: T.StructType, columns: tuple[str, ...], *, what: str) -> None:
    fields = {f.name: f for f in schema.fields}
    for column in columns:
        if not isinstance(fields[column].dataType, _PARTITION_TYPES):
            raise ConfigError(
                f"column {column!r} has type {fields[column].dataType.simpleString()}, which {what} does not "
                "name the way Spark does; use a string, integer, boolean or date column.",
                key="partition_by",
            )
