"""``<table>/_seo/table``: who this table is, written once when the sink first opens it.

Bytes::

    v1
    {"tableId":"5b0c...","rootUri":"file:///data/events","createdMs":1795313165250,"compactInterval":10,"format":"parquet","partitionBy":["day"],"firstBatchId":0,"writerOptions":{"compression":"zstd"}}

* ``rootUri`` is the root the manifest's absolute paths were written under; readers use it to
  read a table that was moved or copied to a new root (manifest paths are absolute URIs).
* ``compactInterval`` is recorded so that our readers need not derive it from file names.
* ``writerOptions`` are the Spark writer options of the data files (readers need ``header`` and
  ``sep`` of CSV tables).
* ``firstBatchId`` is the first manifest batch this sink wrote; earlier batches were written by
  Spark's own file sink before the table was adopted, and have no commit records.
* ``kind`` (absent = ``"table"``): ``"group"`` on the root of a dataset group, ``"member"`` on
  each of its tables, which then also carry ``"group":"../.."`` (the way up to the root). A
  member's identity is what keeps a single-table writer from writing it behind the group's back::

    {"tableId":"...","rootUri":"file:///lake/orders","createdMs":...,"compactInterval":10,"format":"parquet","partitionBy":["day"],"firstBatchId":0,"writerOptions":{},"kind":"member","group":".."}
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field as dc_field
from typing import Any

from ..errors import ConfigError
from ..log.codec import field
from ..log.record_file import encode_record, read_record
from ..storage.base import Storage
from .layout import TABLE_FILE

VERSION = 1
HINT = (
    "The identity file is written once per table and never changes. Restore it from a backup, or "
    "delete it (the sink recreates it, with a new table id) if you are sure this is the right table."
)


@dataclass(frozen=True)
class TableIdentity:
    table_id: str
    root_uri: str
    created_ms: int
    compact_interval: int
    format: str
    partition_by: tuple[str, ...] = dc_field(default_factory=tuple)
    first_batch_id: int = 0
    writer_options: dict[str, str] = dc_field(default_factory=dict)
    #: A table of a dataset group: the relative path from this table up to the group root
    #: (``".."``); its batches are written only by the group's writer (``DatasetSink``).
    group: str | None = None
    #: ``"table"``, ``"member"`` (a table of a dataset group) or ``"group"`` (a group root).
    kind: str = "table"

    def to_json(self) -> dict[str, Any]:
        out = self._base_json()
        if self.kind != "table":
            out["kind"] = self.kind
        if self.group is not None:
            out["group"] = self.group
        return out

    def _base_json(self) -> dict[str, Any]:
        return {
            "tableId": self.table_id,
            "rootUri": self.root_uri,
            "createdMs": self.created_ms,
            "compactInterval": self.compact_interval,
            "format": self.format,
            "partitionBy": list(self.partition_by),
            "firstBatchId": self.first_batch_id,
            "writerOptions": dict(self.writer_options),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "TableIdentity":
        return cls(
            table_id=field(obj, "tableId", str),
            root_uri=field(obj, "rootUri", str),
            created_ms=field(obj, "createdMs", int),
            compact_interval=field(obj, "compactInterval", int),
            format=field(obj, "format", str),
            partition_by=tuple(field(obj, "partitionBy", list, optional=True, default=[])),
            first_batch_id=field(obj, "firstBatchId", int, optional=True, default=0),
            writer_options=dict(field(obj, "writerOptions", dict, optional=True, default={})),
            group=field(obj, "group", str, optional=True),
            kind=field(obj, "kind", str, optional=True, default="table"),
        )


def read_identity(storage: Storage) -> TableIdentity | None:
    return read_record(storage, TABLE_FILE, TableIdentity.from_json, hint=HINT, version=VERSION)


def ensure_identity(
    storage: Storage, *, compact_interval: int, format: str, partition_by: tuple[str, ...], first_batch_id: int = 0,
    writer_options: dict[str, str] | None = None, kind: str = "table", group: str | None = None,
) -> TableIdentity:
    """Read the identity, or create it (exclusively) for a new table; check it matches."""
    existing = read_identity(storage)
    if existing is None:
        identity = TableIdentity(
            table_id=str(uuid.uuid4()),
            root_uri=storage.root_uri,
            created_ms=int(time.time() * 1000),
            compact_interval=compact_interval,
            format=format,
            partition_by=tuple(partition_by),
            first_batch_id=first_batch_id,
            writer_options=dict(writer_options or {}),
            kind=kind,
            group=group,
        )
        try:
            storage.put_if_absent(TABLE_FILE, encode_record(identity.to_json(), version=VERSION))
        except FileExistsError:  # another writer created it first: use theirs
            existing = read_identity(storage)
        else:
            return identity
    assert existing is not None
    if existing.kind != kind:
        raise ConfigError(_kind_mismatch(storage.root_uri, existing, kind), table=storage.root_uri)
    if tuple(partition_by) != existing.partition_by:
        raise ConfigError(
            f"Table {storage.root_uri} is partitioned by {list(existing.partition_by)}, but the sink was "
            f"configured with partition_by={list(partition_by)}. Use the table's partitioning or a new table.",
            table=storage.root_uri,
        )
    if existing.format != format:
        raise ConfigError(
            f"Table {storage.root_uri} holds {existing.format!r} files, but the sink was configured with "
            f"format={format!r}. Use format={existing.format!r} or write to a new table.",
            table=storage.root_uri,
        )
    return existing


def _kind_mismatch(root: str, existing: TableIdentity, wanted: str) -> str:
    if existing.kind == "member":
        return (
            f"{root} is a table of the dataset group at {existing.group!r} (relative to it); only the group's "
            "writer (DatasetSink on the group root) may write it. Write to the group, or use another table."
        )
    if existing.kind == "group":
        return (
            f"{root} is the root of a dataset group (its tables are directories under it); write it with "
            "DatasetSink, or pick another directory for this table."
        )
    return (
        f"{root} is a single table written by ExactlyOnceSink, not a dataset group; a DatasetSink needs "
        "its own root directory."
    )
