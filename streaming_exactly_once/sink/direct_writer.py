"""``direct`` staging: executors write final, uniquely named files; the manifest is the only commit.

Made for object stores, where a "rename" is a copy and a delete. Each Spark task converts its
rows to Arrow (``mapInArrow``) and writes them with pyarrow straight to
``<table>/<k=v>/part-<task>-<uuid>.c000.<ext>`` through the table's storage, after first writing
an *intent* ``_seo/staging/M-<attempt>/intents/<uuid>`` naming that file (a thread writes it while
the file's first rows gather in memory; the file is created once it is durable). The files are not in
the manifest, so no manifest reader sees them until the commit; if the attempt dies, recovery
reads the intents and deletes exactly those files - no listing of the table.

Trade-off: on a local disk a naive directory reader (not going through the manifest) can see a
file while it is written; use ``rename`` there (the default). Formats: parquet, csv, json lines.
Partition values are written as Spark names them (strings, integers, booleans, dates).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.sql import DataFrame, types as T

from ..commit.committer import BatchAttempt, StagedFile
from ..commit.protocol.recovery import INTENTS_SUBDIR
from ..manifest.paths import partition_dir
from ..storage.base import Storage
from .arrow_file_writer import (
    EXTENSIONS,
    ArrowTask,
    FileSink,
    PendingRows,
    ResultFields,
    check_partition_types,
    partition_text,
    result_batch,
    result_ddl,
    split_by,
)

RESULT_FIELDS: ResultFields = (("final", "string"), ("size", "long"), ("mtime", "long"), ("rows", "long"))


#: Threads a task records its files' intents with: each is a small durable write that waits on
#: the storage, made while the file's first rows gather in memory.
INTENT_THREADS = 4


def make_task_writer(storage: Storage, staging: str, fmt: str, partition_by: tuple[str, ...], options: dict[str, str]) -> ArrowTask:
    ext = EXTENSIONS[fmt]

    def write_files(batches: Iterator[Any], task: int) -> dict[str, list[Any]]:
        import pyarrow as pa

        sinks: dict[str, FileSink] = {}
        pending = PendingRows()
        intents = ThreadPoolExecutor(max_workers=INTENT_THREADS, thread_name_prefix="seo-intent")
        try:

            def sink_for(directory: str, schema: pa.Schema) -> FileSink:
                if directory not in sinks:
                    file_id = uuid.uuid4()
                    name = f"part-{task:05d}-{file_id}{ext}"
                    final = f"{directory}/{name}" if directory else name
                    # the intent is durable before the file exists: FileSink creates the file
                    # only after ``recorded.result()`` returned (and not at all if it raised)
                    recorded = intents.submit(storage.put_if_absent, f"{staging}/{INTENTS_SUBDIR}/{file_id}", final.encode("utf-8"))
                    sinks[directory] = FileSink(storage, final, fmt, schema, options, pending=pending, before_open=recorded.result)
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

            out: dict[str, list[Any]] = {"final": [], "size": [], "mtime": [], "rows": []}
            for s in sinks.values():
                s.close()
                info = storage.info(s.final)
                out["final"].append(s.final)
                out["size"].append(info.size)
                out["mtime"].append(info.mtime_ms)
                out["rows"].append(s.rows)
        except BaseException:
            # intents not yet written are for files that will never exist (a cancelled one
            # raises in ``result()``, so its file is not created either)
            intents.shutdown(wait=True, cancel_futures=True)
            raise
        intents.shutdown(wait=True)
        return out

    def write_partition(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        written = write_files(batches, ctx.partitionId() if ctx is not None else 0)
        if written["final"]:
            yield result_batch(RESULT_FIELDS, written)

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
        return sorted((StagedFile(final=r["final"], size=r["size"], mtime_ms=r["mtime"], rows=r["rows"]) for r in rows), key=lambda f: f.final)
