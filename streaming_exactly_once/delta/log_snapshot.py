"""``LogSnapshot``: what the commit of one batch needs from a Delta log, kept up to date without
listing ``_delta_log``.

A batch's Delta step needs the newest version, the table's ``metaData`` (schema, partition
columns, configuration), its ``protocol`` and our app's ``txn``. delta-rs finds the newest
version by listing ``_delta_log``; on a local or HDFS disk that listing touches every file the
log retention keeps (11,001 files after 10,000 batches at Delta's default 30 days), so the step
grew with the table's age. Delta commits are numbered without gaps and never rewritten, so the
versions after a known one are found by reading ``<v+1>.json``, ``<v+2>.json``, ... until one is
absent: the snapshot is taken from delta-rs once per process, then only moves forward by reading
the commits written since (ours or another writer's).

Staleness is bounded two ways. A commit file the snapshot has not read yet can disappear only
through log cleanup, which removes commits older than a checkpoint: a ``_last_checkpoint`` newer
than the snapshot's version means the snapshot is too old to move forward, and the log is loaded
again. And a commit of a version that already exists cannot be written (create-if-absent), so a
snapshot that missed a concurrent commit loses the race instead of writing over it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field as dc_field, replace
from typing import Any

from ..storage.base import Storage

LOG_DIR = "_delta_log"


@dataclass(frozen=True)
class LogMetadata:
    """A ``metaData`` action, with the attribute names of delta-rs's ``Metadata``."""

    id: str
    name: str | None
    description: str | None
    schema_string: str
    partition_columns: list[str]
    created_time: int | None
    configuration: dict[str, str]


@dataclass(frozen=True)
class LogProtocol:
    """A ``protocol`` action, with the attribute names of delta-rs's ``ProtocolVersions``."""

    min_reader_version: int
    min_writer_version: int
    reader_features: list[str] | None
    writer_features: list[str] | None


class _Schema:
    def __init__(self, text: str) -> None:
        self._text = text

    def to_json(self) -> str:
        return self._text


@dataclass(frozen=True)
class LogSnapshot:
    """The newest version of a Delta log as far as this process has read it."""

    version: int
    meta: LogMetadata
    proto: LogProtocol
    txns: dict[str, int] = dc_field(default_factory=dict)

    # the methods of delta-rs's DeltaTable the commit path uses, so checks take either
    def metadata(self) -> LogMetadata:
        return self.meta

    def protocol(self) -> LogProtocol:
        return self.proto

    def schema(self) -> _Schema:
        return _Schema(self.meta.schema_string)

    def transaction_version(self, app: str) -> int | None:
        return self.txns.get(app)

    @classmethod
    def of_table(cls, table: Any, app: str) -> LogSnapshot:
        """The snapshot of a loaded delta-rs table (our app's ``txn`` only)."""
        m, p = table.metadata(), table.protocol()
        meta = LogMetadata(
            id=m.id,
            name=m.name,
            description=m.description,
            schema_string=table.schema().to_json(),
            partition_columns=list(m.partition_columns or []),
            created_time=m.created_time,
            configuration=dict(m.configuration or {}),
        )
        proto = LogProtocol(
            p.min_reader_version,
            p.min_writer_version,
            list(p.reader_features) if p.reader_features is not None else None,
            list(p.writer_features) if p.writer_features is not None else None,
        )
        found = table.transaction_version(app)
        return cls(int(table.version()), meta, proto, {} if found is None else {app: int(found)})

    def applied(self, version: int, data: bytes, app: str) -> LogSnapshot:
        """This snapshot moved to ``version``, whose commit file holds ``data``."""
        meta, proto, txns = self.meta, self.proto, self.txns
        for line in data.splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "metaData" in action:
                meta = _metadata(action["metaData"])
            elif "protocol" in action:
                proto = _protocol(action["protocol"])
            elif "txn" in action and action["txn"].get("appId") == app:
                txns = {**txns, app: int(action["txn"]["version"])}
        return replace(self, version=version, meta=meta, proto=proto, txns=txns)

    def advanced(self, storage: Storage, app: str) -> LogSnapshot | None:
        """The snapshot moved past every commit written since; None when it is too old to move
        forward (a checkpoint newer than it: the commits after it may have been cleaned up)."""
        newest = last_checkpoint_version(storage)
        if newest is not None and newest > self.version:
            return None
        snap = self
        while True:
            data = read_commit(storage, snap.version + 1)
            if data is None:
                return snap
            snap = snap.applied(snap.version + 1, data, app)


def commit_path(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.json"


def read_commit(storage: Storage, version: int) -> bytes | None:
    """The bytes of commit ``version``, None if there is no such file (yet)."""
    try:
        return storage.read_bytes(commit_path(version))
    except FileNotFoundError:
        return None


def unloadable_version_cause(storage: Storage) -> str:
    """Why the log does not load at a version (delta-rs raises either way): log retention removed
    it - unless the log still keeps version 0's commit, so nothing was removed, and a damaged
    ``_last_checkpoint`` or checkpoint file is what the version's readers start from."""
    if storage.exists(commit_path(0)):
        return "is in the log (no commit was removed), but the log does not load at it (a damaged `_last_checkpoint` or checkpoint?)"
    return "is no longer in the log (Delta log retention, delta.logRetentionDuration, removed it)"


def last_checkpoint_version(storage: Storage) -> int | None:
    """The version ``_delta_log/_last_checkpoint`` names; None if there is none (or it does not
    parse: it is a hint, and the commits read forward decide)."""
    try:
        data = storage.read_bytes(f"{LOG_DIR}/_last_checkpoint")
    except FileNotFoundError:
        return None
    try:
        return int(json.loads(data)["version"])
    except (ValueError, KeyError, TypeError):
        return None


def _metadata(action: dict[str, Any]) -> LogMetadata:
    return LogMetadata(
        id=str(action.get("id", "")),
        name=action.get("name"),
        description=action.get("description"),
        schema_string=str(action.get("schemaString", "")),
        partition_columns=list(action.get("partitionColumns") or []),
        created_time=action.get("createdTime"),
        configuration={str(k): str(v) for k, v in (action.get("configuration") or {}).items()},
    )


def _protocol(action: dict[str, Any]) -> LogProtocol:
    return LogProtocol(
        int(action.get("minReaderVersion", 1)),
        int(action.get("minWriterVersion", 2)),
        action.get("readerFeatures"),
        action.get("writerFeatures"),
    )
