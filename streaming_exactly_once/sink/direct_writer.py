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

import uuid
from collections.abc import Iterator
from typing import Any

from pyspark.sql import DataFrame, types as T

from ..commit.committer import BatchAttempt, StagedFile
from ..commit.recovery import INTENTS_SUBDIR
from ..manifest.paths import partition_dir
from ..storage.base import Storage
from .arrow_file_writer import (
    EXTENSIONS,
    ArrowTask,
    FileSink,
    ResultFields,
    check_partition_types,
    partition_text,
    result_batch,
    result_ddl,
    split_by,
)

RESULT_FIELDS: ResultFields = (("final", "string"), ("size", "long"), ("mtime", "long"), ("rows", "long"))


def make_task_writer(storage: Storage, staging: str, fmt: str, partition_by: tuple[str, ...], options: dict[str, str]) -> ArrowTask:
    ext = EXTENSIONS[fmt]

    def write_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else 0
        sinks: dict[str, FileSink] = {}

        def sink_for(directory: str, schema: pa.Schema) -> FileSink:
            if directory not in sinks:
                file_id = uuid.uuid4()
                name = f"part-{task:05d}-{file_id}{ext}"
                final = f"{directory}/{name}" if directory else name
                storage.put_if_absent(f"{staging}/{INTENTS_SUBDIR}/{file_id}", final.encode("utf-8"))
                sinks[directory] = FileSink(storage, final, fmt, schema, options)
            return sinks[directory]

        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch])
            if not partition_by:
                sink_for("", table.schema).write(table)
                continue
            for key, part in split_by(table, partition_by):
                part = part.drop_columns(list(partition_by))
                directory = partition_dir([(c, partition_text(key[c])) for c in partition_by])
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
            yield result_batch(RESULT_FIELDS, {"final": finals, "size": sizes, "mtime": mtimes, "rows": rows})

    return write_partition


class DirectWriter:
    def __init__(self, storage: Storage, *, format: str, partition_by: tuple[str, ...], options: dict[str, str]) -> None:
        self.storage = storage
        self.format = format
        self.partition_by = partition_by
        self.options = dict(options)

    #: every file's rows come back from the task that wrote it
    counts_rows = True

    def check_schema(self, schema: T.StructType) -> None:
        check_partition_types(schema, self.partition_by, what="staging_mode='direct' (use 'rename' for it)")

    def write(self, df: DataFrame, attempt: BatchAttempt) -> list[StagedFile]:
        self.check_schema(df.schema)
        fn = make_task_writer(self.storage, attempt.staging_dir, self.format, self.partition_by, self.options)
        rows = df.mapInArrow(fn, result_ddl(RESULT_FIELDS)).collect()
        return sorted(
            (StagedFile(final=r["final"], size=r["size"], mtime_ms=r["mtime"], rows=r["rows"]) for r in rows), key=lambda f: f.final
        )
