"""Small real tables for reader and maintenance tests: Parquet batches written through the commit
protocol (``TableCommitter``/``GroupCommitter``) without Spark, the way the sink's writers do."""

from __future__ import annotations

import io
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq

from streaming_exactly_once.checkpoint.reader import InputFile
from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile, TableCommitter
from streaming_exactly_once.commit.groups.group_committer import GroupCommitter, MemberBatch
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import with_faults
from tests.commit.helpers import stage_file

Q = "77777777-7777-7777-7777-777777777777"


def parquet_bytes(rows: list[int]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(rows, pa.int64())}), buf)
    return buf.getvalue()


def committer(root: str, *, fail_at: str | None = None, timeout_ms: int = 60_000, storage_options=None, **opts) -> TableCommitter:
    options = CommitterOptions(heartbeat=False, lease_timeout_ms=timeout_ms, **opts)
    storage = open_storage(root, storage_options)
    return TableCommitter(with_faults(storage, fail_at=fail_at) if fail_at else storage, options)


def stage(c: TableCommitter, attempt, rows: list[int], *, mode: str, nfiles: int = 2, partition: str = "p=a") -> list[StagedFile]:
    """Write the batch's files as the sink's writers do: rename mode under the staging directory,
    direct mode an intent first and then the file under its final name."""
    assert attempt.mode == mode
    return [
        stage_file(
            c.storage, attempt, f"{partition}/part-{i:05d}-{attempt.attempt}-{attempt.batch_id}.c000.snappy.parquet", parquet_bytes(rows[i::nfiles])
        )
        for i in range(nfiles)
    ]


def commit_batch(c: TableCommitter, spark_batch: int, rows: list[int], *, mode: str = "rename", query: str = Q, **kw):
    """One whole batch; on failure the attempt is cleaned up as the sink does."""
    c.ensure_open()
    try:
        with c.batch(query, spark_batch, mode=mode) as attempt:  # aborted if the block raises
            files = stage(c, attempt, rows, mode=mode, **kw)
            inputs = [InputFile(source=0, path=f"file:///in/{spark_batch}.csv", timestamp=1)]
            return c.commit(attempt, files, input_files=inputs, num_rows=len(rows))
    except BaseException:
        c.invalidate()
        raise


def rows_of(batch: int) -> list[int]:
    return list(range(batch * 10, batch * 10 + 10))


def write_table(root: str, batches: int = 2, **opts) -> list[int]:
    """A table of ``batches`` committed batches; returns every row id."""
    c = committer(root, **opts)
    for b in range(batches):
        commit_batch(c, b, rows_of(b))
    c.close()
    return [r for b in range(batches) for r in rows_of(b)]


def write_group(root: str, tables: dict[str, list[int]], *, spark_batch: int = 0) -> None:
    """One group batch putting ``rows`` into each table of a dataset group at ``root``."""
    g = GroupCommitter(open_storage(root), CommitterOptions(heartbeat=False))
    g.open()
    attempt = g.begin(Q, spark_batch, mode="rename")
    members = []
    for table, rows in tables.items():
        rel = f"day=1/part-{spark_batch:05d}-{table.replace('/', '_')}.c000.snappy.parquet"
        staged = f"{attempt.staging_dir}/data/{table}/{rel}"
        g.storage.put_if_absent(staged, parquet_bytes(rows))
        info = g.storage.info(staged)
        files = [StagedFile(rel, info.size, info.mtime_ms, staged)]
        members.append(MemberBatch(table=table, files=files, rows=len(rows), format="parquet", partition_by=("day",)))
    assert g.commit_group(attempt, members).status == "committed"
    g.close()


def age(root: str, seconds: float = 7200) -> None:
    """Make every file under ``root`` look ``seconds`` old (gc only deletes files older than --older-than)."""
    then = time.time() - seconds
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(dirpath, name), (then, then), follow_symlinks=False)


def retired(table: str | os.PathLike, rel: str, payload: bytes | None, *, batch_id: int = 9, left_ms: int | None = None) -> None:
    """A data file the sink published once and a compaction batch left out of the listing: the
    file, and the ``_seo/retired`` record the batch wrote first (``manifest.retired``) - what
    ``retention`` or a rewrite leaves once the manifest files naming the file are deleted.
    ``payload`` None: the file is there already. ``left_ms``: when it left the listing (default
    two hours ago, as ``age``)."""
    from streaming_exactly_once.manifest.entry import ManifestEntry
    from streaming_exactly_once.manifest.retired import record_retired

    storage = open_storage(str(table))
    if payload is not None:
        storage.put_if_absent(rel, payload)
    info = storage.info(rel)
    entry = ManifestEntry.for_file(storage.uri(rel), size=info.size, modification_time=info.mtime_ms)
    record_retired(storage, batch_id, [entry], int((time.time() - 7200) * 1000) if left_ms is None else left_ms)
