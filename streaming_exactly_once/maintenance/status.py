"""``status``: one look at a table - its batches, writer, pending work, size and watermarks."""

from __future__ import annotations

import time
from typing import Any

from ..commit.protocol.lease import read_lease_state
from ..commit.protocol.wal import CommitSequenceStore
from ..errors import ExactlyOnceError
from ..formats.registry import format_status, formats_of
from ..readers.history import batches
from ..readers.visibility import committed_files
from ..storage.base import Storage
from ..table.group_state import split_state
from ..table.identity import read_identity
from ..table.layout import STAGING_DIR
from ..table.refusal import read_refusal
from ..table.rejections import REJECTED_DIR
from ..table.schema_log import schema_history
from ..table.schema_rules import fields_of, type_text
from ..table.source_offsets import table_marks
from ..table.table_logs import TableLogs


def table_status(storage: Storage) -> dict[str, Any]:
    identity = read_identity(storage)
    if identity is not None and identity.kind == "group":
        return group_status(storage)
    logs = TableLogs.for_identity(storage, identity)
    assert logs.manifest is not None
    latest = logs.manifest.latest_batch_id(refresh=True)
    out: dict[str, Any] = {"table": storage.root_uri, "latestBatchId": latest}
    if identity is not None:
        out["tableId"] = identity.table_id
        out["format"] = identity.format
        out["partitionBy"] = list(identity.partition_by)
        out["compactInterval"] = identity.compact_interval
        out["createdMs"] = identity.created_ms
        if identity.root_uri != storage.root_uri:
            out["writtenAt"] = identity.root_uri
        if not identity.spark_manifest:
            out["manifest"] = identity.manifest_dir
        for spec in formats_of(identity):  # Delta's, then Iceberg's
            out[spec.name] = format_status(spec, storage, identity)
    else:
        out["writer"] = "Spark file sink (no _seo/ metadata)"
    try:
        files = committed_files(storage.root_uri, storage_options=storage.options(), allow_outside_root=True)
        out["files"] = len(files)
        out["bytes"] = files.total_bytes
    except ExactlyOnceError as exc:
        out["manifestError"] = str(exc)
    history = batches(storage.root_uri, storage_options=storage.options()) if latest is not None else []
    readable = [b.batch_id for b in history if b.readable]
    out["timeTravel"] = {"oldest": readable[0], "latest": readable[-1]} if readable else None
    if identity is not None:
        per_query = logs.commits.latest_per_query()
        newest = max(per_query.values(), key=lambda r: r.batch_id, default=None)
        out["rows"] = newest.table_rows if newest is not None else 0
        out["lastCommitMs"] = newest.commit_time_ms if newest is not None else None
        out["queries"] = [
            {
                "queryId": r.query_id,
                "lastSparkBatchId": r.spark_batch_id,
                "lastBatchId": r.batch_id,
                "commitTimeMs": r.commit_time_ms,
                "watermarks": r.watermarks,
            }
            for r in sorted(per_query.values(), key=lambda r: r.batch_id)
        ]
        if logs.offsets is not None:
            # where the table's records of each partitioned source (Kafka) end: a lost
            # checkpoint restarts from here (``sink.starting_offsets()``)
            out["sourceOffsets"] = dict(sorted(table_marks(logs.offsets.all_records()).items()))
    if identity is not None and identity.kind == "member":
        out["group"] = identity.group
    if identity is not None:
        out.update(schema_status(storage, latest))
    _writer_and_pending(storage, out)
    return out


def schema_status(storage: Storage, latest: int | None) -> dict[str, Any]:
    """``schema``: the table's columns now, and the batch and reason of its record;
    ``schemaHistory``: every record up to the latest batch (``table.schema_log``)."""
    try:
        history = schema_history(storage, up_to=latest) if latest is not None else []
    except ExactlyOnceError as exc:
        return {"schemaError": str(exc)}
    if not history:
        return {"schema": None, "schemaHistory": []}
    current = history[-1]
    columns = [{"name": f["name"], "type": type_text(f["type"], bool(f.get("nullable", True)))} for f in fields_of(current.schema)]
    return {
        "schema": {"batchId": current.batch_id, "reason": current.reason, "partitionBy": list(current.partition_by), "columns": columns},
        "schemaHistory": [{"batchId": r.batch_id, "reason": r.reason, "changes": list(r.changes)} for r in history],
    }


def group_status(storage: Storage) -> dict[str, Any]:
    """A dataset group: its latest group batch, and per table the state its newest record holds."""
    identity = read_identity(storage)
    logs = TableLogs.for_identity(storage, identity)
    per_query = logs.commits.latest_per_query()
    newest = max(per_query.values(), key=lambda r: r.batch_id, default=None)
    state, quarantine = split_state((newest.datasets or {}) if newest is not None else {})
    out: dict[str, Any] = {
        "group": storage.root_uri,
        "latestBatchId": newest.batch_id if newest is not None else None,
        "rows": newest.table_rows if newest is not None else 0,
        "lastCommitMs": newest.commit_time_ms if newest is not None else None,
        "tables": state,
        "quarantineTables": quarantine,
        "sourcePartitions": (newest.source_partitions or {}) if newest is not None else {},
        "rejectedBatches": len(storage.list_dir(REJECTED_DIR)),
        "queries": [
            {"queryId": r.query_id, "lastSparkBatchId": r.spark_batch_id, "lastBatchId": r.batch_id, "commitTimeMs": r.commit_time_ms}
            for r in sorted(per_query.values(), key=lambda r: r.batch_id)
        ],
    }
    _writer_and_pending(storage, out)
    return out


def _writer_and_pending(storage: Storage, out: dict[str, Any]) -> None:
    state = read_lease_state(storage)
    if state is not None:
        now = int(time.time() * 1000)
        out["lease"] = {
            "epoch": state.epoch,
            "alive": state.alive,
            "state": state.reason,
            "host": state.writer.host if state.writer else None,
            "pid": state.writer.pid if state.writer else None,
            "description": state.writer.description if state.writer else None,
            "heartbeatAgeS": round((now - state.heartbeat.heartbeat_ms) / 1000, 1) if state.heartbeat else None,
        }
    out["pendingCommits"] = CommitSequenceStore(storage).pending()
    out["stagingDirs"] = len(storage.list_dir(STAGING_DIR))
    try:
        refusal = read_refusal(storage)
    except ExactlyOnceError as exc:
        out["refusalError"] = str(exc)
        return
    if refusal is not None:
        committed = out.get("lastCommitMs")
        out["lastRefusal"] = {**refusal.to_json(), "committedSince": committed is not None and committed > refusal.time_ms}
