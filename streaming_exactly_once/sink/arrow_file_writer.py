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
from typing import IO, TYPE_CHECKING, Any

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


#: Rows a file gathers before they are encoded as one Parquet row group (and, for CSV and JSON,
#: written). Spark hands ``mapInArrow`` batches of 10,000 rows; written one by one, each was a row
#: group of its own, ~40% more bytes than one row group and slower to read. DuckDB's row groups
#: are 122,880 rows; a group stays small enough that its encoding, done when it is full or the
#: file closes, is a short tail to a task.
ROW_GROUP_ROWS = 131_072

#: Arrow bytes one task may hold unwritten across all its open files (a partitioned write opens
#: one file per directory). Above it, the files holding the most write what they hold.
TASK_PENDING_BYTES = 64 << 20

#: What one held table costs beyond its values (Arrow's and Python's objects, ~2 KB measured): a
#: write to 2,000 directories splits each 10,000-row batch into 5-row tables, and counting their
#: values alone let 1.2 GB pass for 40 MB.
HELD_TABLE_BYTES = 2048

#: Rows of a file's first row group that decide which of its columns are dictionary encoded.
DICTIONARY_SAMPLE_ROWS = 10_000


def dictionary_columns(schema: pa.Schema, tables: list[pa.Table]) -> list[str]:
    """The Parquet column paths worth dictionary encoding, judged on a sample of the first rows.

    pyarrow encodes every column with a dictionary until the dictionary outgrows 1 MB; for a
    column of distinct values (ids, measures) that stores each value twice, once in the
    dictionary and once as an index: 100,000 distinct longs took 1.0 MB instead of 800 KB. Spark's
    writer (parquet-mr) keeps a dictionary only while it is smaller than the plain values, and so
    does this: a top-level column keeps one if, on the sample, the distinct values plus an index
    per value take fewer bytes than the values. Nested columns keep pyarrow's default."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    sample = pa.concat_tables(tables).slice(0, DICTIONARY_SAMPLE_ROWS) if tables else schema.empty_table()
    nested = [f.name for f in schema if pa.types.is_nested(f.type)]
    chosen = [f.name for f in schema if not pa.types.is_nested(f.type) and _dictionary_pays(sample[f.name])]
    if nested:  # a nested column's dictionaries are set per leaf: their paths as Parquet spells them
        buffer = io.BytesIO()
        pq.write_table(pa.schema([schema.field(n) for n in nested]).empty_table(), buffer)
        leaves = pq.ParquetFile(io.BytesIO(buffer.getvalue())).schema
        chosen += [leaves.column(i).path for i in range(len(leaves))]
    return chosen


def _dictionary_pays(column: pa.ChunkedArray) -> bool:
    import math

    import pyarrow as pa
    import pyarrow.compute as pc

    values = len(column) - column.null_count
    if values == 0 or pa.types.is_dictionary(column.type):
        return True
    try:
        distinct = pc.count_distinct(column, mode="only_valid").as_py()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # a type Arrow cannot hash: pyarrow's default
        return True
    t = column.type
    if any(is_kind(t) for is_kind in (pa.types.is_binary, pa.types.is_string, pa.types.is_large_binary, pa.types.is_large_string)):
        width = pc.sum(pc.binary_length(column)).as_py() / values + 4  # Parquet stores a length before each value
    else:
        try:
            width = t.bit_width / 8
        except ValueError:  # no fixed width known: leave it to pyarrow
            return True
    index_bytes = values * max(1, math.ceil(math.log2(distinct + 1))) / 8
    return bool(distinct * width + index_bytes < values * width)


class PendingRows:
    """The rows a task's open files hold in memory, not yet written, bounded together."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = TASK_PENDING_BYTES if limit is None else limit
        self.total = 0
        self.sinks: set[FileSink] = set()

    def added(self, nbytes: int) -> None:
        self.total += nbytes
        if self.total <= self.limit:
            return
        # Write out the fullest files until half the bound is free, so that the next writes do
        # not each scan every open file to write a sliver.
        for sink in sorted(self.sinks, key=lambda s: s.pending_bytes, reverse=True):
            if self.total <= self.limit // 2 or not sink.pending_bytes:
                return
            sink.flush()


class FileSink:
    """One output file of a task.

    The file is created when its first rows are written, not when the sink is made: rows gather
    in memory up to ``ROW_GROUP_ROWS`` (or the task's ``PendingRows`` limit) and are then encoded
    together. Until then ``before_open`` may still be under way - direct mode records the file's
    intent there, and a file must never exist before its intent does."""

    def __init__(
        self,
        storage: Storage,
        final: str,
        fmt: str,
        schema: pa.Schema,
        options: Mapping[str, str],
        *,
        pending: PendingRows | None = None,
        before_open: Callable[[], object] | None = None,
    ) -> None:
        self.storage = storage
        self.final = final
        self.fmt = fmt
        self.schema = schema
        self.options = options
        self.before_open = before_open
        self.rows = 0
        self.pending_tables: list[pa.Table] = []
        self.pending_rows = 0
        self.pending_bytes = 0
        self.pending = pending if pending is not None else PendingRows()
        self.pending.sinks.add(self)
        self.fh: IO[bytes] | None = None
        self.writer: Any = None

    def _open(self) -> IO[bytes]:
        if self.before_open is not None:
            self.before_open()  # raises if it failed: then no file is made
        fh = self.fh = self.storage.open_write(self.final)
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            self.writer = pq.ParquetWriter(
                fh,
                self.schema,
                compression=self.options.get("compression", "snappy"),
                use_dictionary=dictionary_columns(self.schema, self.pending_tables),
            )
        elif self.fmt == "csv":
            import pyarrow.csv as pacsv

            header = str(self.options.get("header", "false")).lower() == "true"
            delimiter = self.options.get("sep", self.options.get("delimiter", ","))
            self.writer = pacsv.CSVWriter(
                fh, self.schema, write_options=pacsv.WriteOptions(include_header=header, delimiter=delimiter, quoting_style="needed")
            )
        return fh

    def write(self, table: pa.Table) -> None:
        if self.fmt != "json" and not table.schema.equals(self.schema):
            # the check Arrow's writers make, made where the rows come in rather than at the flush
            raise ValueError(f"rows for {self.final} have schema {table.schema}, not the file's {self.schema}")
        held = table.nbytes + HELD_TABLE_BYTES
        self.rows += table.num_rows
        self.pending_tables.append(table)
        self.pending_rows += table.num_rows
        self.pending_bytes += held
        if self.pending_rows >= ROW_GROUP_ROWS:
            self.flush()
        self.pending.added(held)

    def flush(self) -> None:
        """Write the rows held in memory: one row group in Parquet."""
        if not self.pending_tables:
            return
        import pyarrow as pa

        fh = self.fh if self.fh is not None else self._open()
        tables = self.pending_tables
        self.pending.total -= self.pending_bytes
        self.pending_tables, self.pending_rows, self.pending_bytes = [], 0, 0
        if self.fmt == "json":  # a row per line; the tables' schemas may differ
            for table in tables:
                lines = (json.dumps(row, default=_json_default, ensure_ascii=False, separators=(",", ":")) for row in table.to_pylist())
                fh.write(("\n".join(lines) + "\n").encode("utf-8"))
        else:
            self.writer.write_table(tables[0] if len(tables) == 1 else pa.concat_tables(tables))

    def close(self) -> None:
        self.flush()
        fh = self.fh if self.fh is not None else self._open()
        if self.writer is not None:
            self.writer.close()
        fh.close()
        self.pending.sinks.discard(self)


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
