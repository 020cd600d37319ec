"""``direct`` staging: executors write final, uniquely named files; the manifest is the only commit.

Made for object stores, where a "rename" is a copy and a delete. Each Spark task converts its
rows to Arrow (``mapInArrow``) and writes them with pyarrow straight to
``<table>/<k=v>/part-<task>-<uuid>.c000.<ext>`` through the table's storage, after first writing
an *intent* ``_seo/staging/M-<attempt>/intents/<uuid>`` naming that file. The files are not in
the manifest, so no manifest reader sees them until the commit; if the attempt dies, recovery
reads the intents and deletes exactly those files - no listing of the table.

Trade-off: on a local disk a naive directory reader (not going through the manifest) can see a
file while it is written; use ``rename`` there (the default). Formats: parquet, csv, json lines.
Partition values are written as Spark names them (strings, integers, booleans, dates).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any, Iterator

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..commit.committer import BatchAttempt, StagedFile
from ..commit.recovery import INTENTS_SUBDIR
from ..errors import ConfigError
from ..manifest.paths import partition_dir
from ..storage.base import Storage

_PARTITION_TYPES = (T.StringType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.BooleanType, T.DateType)
_EXTENSIONS = {"parquet": ".c000.snappy.parquet", "csv": ".c000.csv", "json": ".c000.json"}
RESULT_SCHEMA = "final string, size long, mtime long, rows long"


def _partition_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    return str(value)


class _FileSink:
    """One open output file of a task."""

    def __init__(self, storage: Storage, final: str, fmt: str, schema, options: dict[str, str]) -> None:
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

    def write(self, table) -> None:
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


def make_task_writer(storage: Storage, staging: str, fmt: str, partition_by: tuple[str, ...], options: dict[str, str]):
    ext = _EXTENSIONS[fmt]

    def write_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else 0
        sinks: dict[str, _FileSink] = {}

        def sink_for(directory: str, schema) -> _FileSink:
            if directory not in sinks:
                file_id = uuid.uuid4()
                name = f"part-{task:05d}-{file_id}{ext}"
                final = f"{directory}/{name}" if directory else name
                storage.put_if_absent(f"{staging}/{INTENTS_SUBDIR}/{file_id}", final.encode("utf-8"))
                sinks[directory] = _FileSink(storage, final, fmt, schema, options)
            return sinks[directory]

        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch])
            if not partition_by:
                sink_for("", table.schema).write(table)
                continue
            data = table.drop_columns(list(partition_by))
            keys = table.select(list(partition_by)).group_by(list(partition_by)).aggregate([])
            for key in keys.to_pylist():
                mask = None
                for column in partition_by:
                    value = key[column]
                    cond = pc.is_null(table[column]) if value is None else pc.equal(table[column], value)
                    mask = cond if mask is None else pc.and_(mask, cond)
                part = data.filter(mask)
                directory = partition_dir([(c, _partition_text(key[c])) for c in partition_by])
                sink_for(directory, part.schema).write(part)

        finals, sizes, mtimes, rows = [], [], [], []
        for s in sinks.values():
            s.close()
            info = storage.info(s.final)
            finals.append(s.final)
            sizes.append(info.size)
            mtimes.append(info.mtime_ms)
            rows.append(s.rows)
        if finals:
            yield pa.RecordBatch.from_pydict(
                {"final": finals, "size": sizes, "mtime": mtimes, "rows": rows},
                schema=pa.schema([("final", pa.string()), ("size", pa.int64()), ("mtime", pa.int64()), ("rows", pa.int64())]),
            )

    return write_partition


class DirectWriter:
    def __init__(self, storage: Storage, *, format: str, partition_by: tuple[str, ...], options: dict[str, str]) -> None:
        self.storage = storage
        self.format = format
        self.partition_by = partition_by
        self.options = dict(options)

    def check_schema(self, schema: T.StructType) -> None:
        fields = {f.name: f for f in schema.fields}
        for column in self.partition_by:
            if not isinstance(fields[column].dataType, _PARTITION_TYPES):
                raise ConfigError(
                    f"partition column {column!r} has type {fields[column].dataType.simpleString()}, which "
                    "staging_mode='direct' does not name the way Spark does; partition by a string, integer, "
                    "boolean or date column, or use staging_mode='rename'.",
                    key="partition_by",
                )

    def write(self, df: DataFrame, attempt: BatchAttempt) -> list[StagedFile]:
        self.check_schema(df.schema)
        fn = make_task_writer(self.storage, attempt.staging_dir, self.format, self.partition_by, self.options)
        rows = df.mapInArrow(fn, RESULT_SCHEMA).collect()
        return sorted(
            (StagedFile(final=r["final"], size=r["size"], mtime_ms=r["mtime"]) for r in rows), key=lambda f: f.final
        )
