"""A batch's Delta commit (every version after the table's first), written as the Delta protocol says.

It is written here rather than by delta-rs: delta-rs 1.6 never writes a ``metaData`` action in
an append (a wider schema given to it is silently dropped - measured here) nor ``remove``
actions, and it lists ``_delta_log`` around each commit (``docs/design/delta.md``). A batch that
adds columns adds them *and* its files in one Delta version - each version is one batch, and a
reader must never see the files without their columns. ``_delta_log/<v>.json`` is created if
absent, the Delta protocol's mutual exclusion between writers (delta-rs does the same with
``conditional_put`` on S3). One line each (shown shortened)::

    {"commitInfo":{"timestamp":1795313165300,"operation":"WRITE","operationParameters":{"mode":"Append",...},"seoBatchId":"7",...}}
    {"metaData":{"id":"<the table's>",...,"schemaString":"<new schema>","partitionColumns":["p"],...}}
    {"txn":{"appId":"streaming-exactly-once:5b0c...","version":7,"lastUpdated":1795313165300}}
    {"add":{"path":"p=a/part-00000-....parquet","partitionValues":{"p":"a"},"size":903,"modificationTime":1795313165250,"dataChange":true,"stats":"{\\"numRecords\\":5}"}}

A compaction batch's commit adds ``remove`` and ``add`` actions with ``dataChange`` false (the
same rows in other files). ``seo compact``'s, which adds no data, is an ``OPTIMIZE``::

    {"commitInfo":{"timestamp":...,"operation":"OPTIMIZE","operationParameters":{"predicate":"[]","zOrderBy":"[]"},"operationMetrics":{"numRemovedFiles":"4","numAddedFiles":"1"},"isBlindAppend":false,...}}

``metaData`` keeps everything of the table's but ``schemaString``; the protocol is unchanged.
Paths are percent-encoded the way delta-rs encodes them (``add_path``). Which changes Delta
allows without ``typeWidening`` - nullable columns added at the end, nothing else - is checked
first (``check_evolution``, Delta's ``mergeSchema`` rule for an append, and its ``DROP NOT NULL``:
a batch that may hold nulls where the table says none makes those columns nullable, in the
same version).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from ..errors import DeltaSchemaMismatchError
from ..storage.base import Storage
from .files import DeltaFile, partition_values
from .schema import fields_of
from .stats import stats_json

LOG_DIR = "_delta_log"
ENGINE = "streaming-exactly-once"
#: What delta-rs leaves unencoded in a path segment (RFC 3986 ``pchar`` minus ``%``), besides ``/``.
_SAFE = "/!$&'()*+,;=:@~"


def _bare(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _bare(v) for k, v in value.items() if k != "metadata"}
    if isinstance(value, list):
        return [_bare(v) for v in value]
    return value


def evolves(current: str, new: str | None) -> bool:
    """Whether ``new`` (a batch's table schema) differs from the log's ``current`` schema."""
    return new is not None and _bare(fields_of(new)) != _bare(fields_of(current))


def _relaxed(old: Any, new: Any) -> Any:
    """``new`` with the nullability flags ``old`` has wherever ``new`` only allows nulls ``old``
    did not (the one change Delta allows to existing columns here: dropping a NOT NULL)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = {k: _relaxed(old.get(k), v) for k, v in new.items()}
        for flag in ("nullable", "containsNull", "valueContainsNull"):
            if flag in old and flag in new and new[flag] and not old[flag]:
                out[flag] = old[flag]
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [_relaxed(o, n) for o, n in zip(old, new, strict=True)]
    return new


def check_evolution(current: str, new: str, *, table: str, log_uri: str) -> None:
    """Delta's rule for an append that changes the schema: ``new`` is ``current`` - whose NOT NULL
    columns, nested fields, array elements or map values may become nullable (Delta's ``DROP NOT
    NULL``) - followed by nullable columns; ``DeltaSchemaMismatchError`` naming what else changed."""
    old, now = fields_of(current), fields_of(new)
    problems = []
    if _bare(_relaxed(old, now[: len(old)])) != _bare(old):
        problems.append("the table's existing columns would change (Delta widens types only with its typeWidening feature)")
    for f in now[len(old) :]:
        if not f.get("nullable", True):
            problems.append(f"added column {f['name']!r} is not nullable")
    if problems:
        raise DeltaSchemaMismatchError(
            f"Delta table {table} (schema in {log_uri}) cannot take the batch's schema change: {'; '.join(problems)}. "
            "Nothing was written. Delta adds nullable columns at the end of the schema only; cast the stream's "
            "columns to the table's types, or write to a new table.",
            table=table,
            problems=problems,
        )


def add_path(path: str) -> str:
    """``path`` (relative, as on disk) as delta-rs writes it in an ``add`` action."""
    return quote(path, safe=_SAFE)


def commit_lines(
    *,
    metadata: Any,
    table_schema: str | None,
    app_id: str,
    batch_id: int,
    files: Sequence[DeltaFile],
    info: Mapping[str, str],
    table: str,
    now_ms: int | None = None,
    removed: Sequence[DeltaFile] = (),
    rearranged: Sequence[DeltaFile] = (),
) -> bytes:
    """The bytes of the commit (module docstring); ``metadata`` is delta-rs's ``Metadata`` of the
    table's current version. ``table_schema`` None: no ``metaData`` action. ``removed`` and
    ``rearranged``: files a compaction batch replaces and the files that replace them - a
    ``remove`` and an ``add``, both with ``dataChange`` false, which Delta's streaming readers
    skip (the same rows, in other files)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    partitions = list(metadata.partition_columns or [])
    if rearranged and not files:  # ``seo compact``'s commit: files rewritten, no data added
        operation: dict[str, Any] = {
            "operation": "OPTIMIZE",
            "operationParameters": {"predicate": "[]", "zOrderBy": "[]"},
            "operationMetrics": {"numRemovedFiles": str(len(removed)), "numAddedFiles": str(len(rearranged))},
            "isBlindAppend": False,
        }
    else:
        operation = {"operation": "WRITE", "operationParameters": {"mode": "Append", "partitionBy": json.dumps(partitions)}}
    actions: list[dict[str, Any]] = [{"commitInfo": {"timestamp": now, **operation, "engineInfo": ENGINE, **dict(info)}}]
    if table_schema is not None:
        actions.append(
            {
                "metaData": {
                    "id": metadata.id,
                    "name": metadata.name,
                    "description": metadata.description,
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": table_schema,
                    "partitionColumns": partitions,
                    "createdTime": metadata.created_time,
                    "configuration": dict(metadata.configuration or {}),
                }
            }
        )
    actions.append({"txn": {"appId": app_id, "version": batch_id, "lastUpdated": now}})
    for f in removed:
        actions.append(
            {
                "remove": {
                    "path": add_path(f.path),
                    "deletionTimestamp": now,
                    "dataChange": False,
                    "extendedFileMetadata": True,
                    "partitionValues": partition_values(f.path, partitions, table=table),
                    "size": f.size,
                }
            }
        )
    for f, change in [(f, True) for f in files] + [(f, False) for f in rearranged]:
        actions.append(
            {
                "add": {
                    "path": add_path(f.path),
                    "partitionValues": partition_values(f.path, partitions, table=table),
                    "size": f.size,
                    "modificationTime": f.mtime_ms,
                    "dataChange": change,
                    **({"stats": stats_json(f.rows)} if f.rows is not None else {}),
                }
            }
        )
    return "\n".join(json.dumps(a, separators=(",", ":"), ensure_ascii=False) for a in actions).encode("utf-8") + b"\n"


def write_commit(storage: Storage, version: int, data: bytes) -> None:
    """Create ``_delta_log/<version>.json``; ``FileExistsError`` if another commit took it."""
    storage.put_if_absent(f"{LOG_DIR}/{version:020d}.json", data)
