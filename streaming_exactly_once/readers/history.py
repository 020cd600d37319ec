"""The table's batch history: what each retained manifest batch committed, and when.

Time travel (``as_of=N``) needs the compact file and deltas that make up batch N's snapshot;
retention deletes old ones, so ``batches`` says which batches can still be read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..log.compaction import all_valid_batches, is_compaction_batch
from ..table.commits_log import CommitsLog
from ..table.identity import read_identity
from ..table.table_logs import open_manifest
from .table_location import locate


@dataclass(frozen=True)
class BatchInfo:
    batch_id: int
    readable: bool  # as_of=batch_id is still possible
    commit_time_ms: int | None
    num_rows: int | None
    num_files: int | None
    num_bytes: int | None
    query_id: str | None
    spark_batch_id: int | None
    watermarks: dict[str, Any]
    #: the batch's manifest file is a ``.compact`` file (it lists every live file, Spark's rule)
    compact_file: bool = False
    #: a compaction batch's rewrites: the files it replaced, and the new files it published
    replaced_files: int = 0
    rewritten_files: int = 0


def batches(path: str, *, storage_options: Mapping[str, Any] | None = None) -> list[BatchInfo]:
    location = locate(path, storage_options)
    storage = location.storage
    identity = read_identity(storage)
    interval = identity.compact_interval if identity else 10
    manifest = open_manifest(storage, identity)
    ids = manifest.list_batch_ids()
    if not ids:
        return []
    manifest.gaps(ids)  # a stray file far beyond the others is a named error, not 10**11 batches
    present = set(ids)
    commits = CommitsLog(storage, interval=interval)
    out = []
    for batch_id in range(min(present), max(present) + 1):
        readable = all(b in present for b in all_valid_batches(batch_id, manifest.interval))
        record = commits.record(batch_id) if identity is not None else None
        out.append(
            BatchInfo(
                batch_id=batch_id,
                readable=readable,
                commit_time_ms=record.commit_time_ms if record else None,
                num_rows=record.num_rows if record else None,
                num_files=record.num_files if record else None,
                num_bytes=record.num_bytes if record else None,
                query_id=record.query_id if record else None,
                spark_batch_id=record.spark_batch_id if record else None,
                watermarks=record.watermarks if record else {},
                compact_file=is_compaction_batch(batch_id, manifest.interval),
                replaced_files=sum(len(r.replaced) for r in record.rewrites) if record else 0,
                rewritten_files=len(record.rewrites) if record else 0,
            )
        )
    return out
