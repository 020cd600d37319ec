"""``<table>/_seo/table``: who this table is, written once when the sink first opens it.

Bytes (``docs/design/table-identity.md`` has every field and version with examples)::

    v1
    {"tableId":"5b0c...","rootUri":"file:///data/events","createdMs":1795313165250,"compactInterval":10,"format":"parquet","partitionBy":["day"],"firstBatchId":0,"writerOptions":{"compression":"zstd"}}

Optional fields: ``kind`` (``"group"``/``"member"``, with ``group``: the way up to a member's
group root), ``otherRootUris`` (other roots the table was written under; rewritten only by
``note_root``), ``sparkManifest`` (false: the manifest is under ``_seo/manifest``), ``delta``
(``{"appId"}``) and ``iceberg`` (``{"appId", "catalog"}``). A table with ``delta`` or
``sparkManifest`` is written as ``v2``, one with ``iceberg`` as ``v3``, so that a release that
knows neither refuses it instead of writing batches its formats would miss.

The writer checks the identity against its configuration (``TableSpec.check``) before recovery
reads a log or deletes anything: a restart with another format, another Iceberg catalog or
table name, or without one of the table's formats is a ``ConfigError``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field as dc_field, replace
from typing import Any

from ..delta.target import app_id as delta_app_id
from ..errors import ConfigError, IdentityError, SchemaMismatchError
from ..iceberg.settings import IcebergCatalogRef, app_id as iceberg_app_id
from ..log.codec import field
from ..log.record_fields import decode, encode, json_field, strings
from ..log.record_file import encode_record, read_record
from ..manifest.manifest_log import DIRECTORY as SPARK_MANIFEST_DIR, PRIVATE_DIRECTORY as PRIVATE_MANIFEST_DIR
from ..manifest.paths import canonical_uri
from ..storage.base import Storage
from ..storage.posix_calls import same_local_directory
from .layout import TABLE_FILE

VERSION = 3  # read up to; v1 is written unless the table uses ``delta``, ``iceberg`` or ``sparkManifest``
HINT = (
    "The identity file is written once per table and changes only when a writer records a new root. "
    "Restore it from a backup, or delete it (the sink recreates it, with a new table id) if you are "
    "sure this is the right table."
)


def _delta_json(app_id: str) -> dict[str, Any]:
    return {"appId": app_id}


def _delta_app_id(delta: dict[str, Any]) -> str:
    return str(field(delta, "appId", str))


@dataclass(frozen=True)
class IcebergIdentity:
    """The Iceberg table of a ``format="iceberg"`` table: its app id and where it is recorded."""

    app_id: str = dc_field(metadata=json_field("appId", str))
    catalog: IcebergCatalogRef = dc_field(
        default=IcebergCatalogRef(), metadata=json_field("catalog", dict, optional=True, omit_default=True, record=IcebergCatalogRef)
    )


@dataclass(frozen=True)
class TableIdentity:
    table_id: str = dc_field(metadata=json_field("tableId", str))
    root_uri: str = dc_field(metadata=json_field("rootUri", str))
    created_ms: int = dc_field(metadata=json_field("createdMs", int))
    compact_interval: int = dc_field(metadata=json_field("compactInterval", int))
    format: str = dc_field(metadata=json_field("format", str))
    partition_by: tuple[str, ...] = dc_field(default_factory=tuple, metadata=json_field("partitionBy", list, optional=True, check=strings))
    first_batch_id: int = dc_field(default=0, metadata=json_field("firstBatchId", int, optional=True))
    writer_options: dict[str, str] = dc_field(
        default_factory=dict, metadata=json_field("writerOptions", dict, optional=True, decode=dict, encode=dict)
    )
    #: ``"table"``, ``"member"`` (a table of a dataset group) or ``"group"`` (a group root).
    kind: str = dc_field(default="table", metadata=json_field("kind", str, optional=True, omit_default=True))
    #: A table of a dataset group: the relative path from this table up to the group root
    #: (``".."``); its batches are written only by the group's writer (``DatasetSink``).
    group: str | None = dc_field(default=None, metadata=json_field("group", str, optional=True, omit_default=True))
    #: Every other root the table was written under (see the module docstring).
    other_root_uris: tuple[str, ...] = dc_field(
        default=(), metadata=json_field("otherRootUris", list, optional=True, omit_default=True, check=strings)
    )
    #: Delta application id of a ``format="delta"`` table; None: no Delta log. On disk
    #: ``"delta":{"appId":"..."}`` (an object, so that Delta settings can join it).
    delta_app_id: str | None = dc_field(
        default=None,
        metadata=json_field("delta", dict, optional=True, omit_default=True, encode=_delta_json, decode=_delta_app_id),
    )
    #: Whether the manifest is ``_spark_metadata`` (Spark's file-source readers honour it).
    spark_manifest: bool = dc_field(default=True, metadata=json_field("sparkManifest", bool, optional=True, omit_default=True))
    #: The Iceberg table of a ``format="iceberg"`` table; None: no Iceberg metadata.
    iceberg: IcebergIdentity | None = dc_field(
        default=None, metadata=json_field("iceberg", dict, optional=True, omit_default=True, record=IcebergIdentity)
    )

    @property
    def is_delta(self) -> bool:
        return self.delta_app_id is not None

    @property
    def is_iceberg(self) -> bool:
        return self.iceberg is not None

    @property
    def table_formats(self) -> tuple[str, ...]:
        """The table formats every batch is published to besides the manifest, in step order."""
        return (*(("delta",) if self.is_delta else ()), *(("iceberg",) if self.is_iceberg else ()))

    @property
    def manifest_dir(self) -> str:
        return SPARK_MANIFEST_DIR if self.spark_manifest else PRIVATE_MANIFEST_DIR

    @property
    def file_version(self) -> int:
        """The format version this identity is written in (see the module docstring)."""
        if self.is_iceberg:
            return 3
        return 2 if self.is_delta or not self.spark_manifest else 1

    @property
    def root_uris(self) -> tuple[str, ...]:
        """Every root the manifest's absolute paths may be under, the first one first."""
        return (self.root_uri, *self.other_root_uris)

    def to_json(self) -> dict[str, Any]:
        return encode(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TableIdentity:
        return decode(cls, obj)


def read_identity(storage: Storage) -> TableIdentity | None:
    return read_record(storage, TABLE_FILE, TableIdentity.from_json, hint=HINT, version=VERSION)


def note_root(storage: Storage, identity: TableIdentity) -> TableIdentity:
    """Record ``storage.root_uri`` as one of the table's roots unless it already is one.

    The writer calls this right after ``ensure_identity``, holding the lease, whenever it opens
    the table: a table written through a symlink and the real path by an earlier release, or moved and then
    written at its new place, gets manifest entries under each root, and readers and ``seo gc``
    must know every one of them. Returns the identity as now on disk. The file is replaced in
    one ``atomic_write`` (readers see the old or the new bytes), starting from what is on disk,
    so no root recorded meanwhile is lost.
    """
    current = read_identity(storage) or identity
    if current.table_id != identity.table_id:
        raise IdentityError(
            f"The identity of {storage.root_uri} changed while it was open (table id {identity.table_id} -> "
            f"{current.table_id}): another table was created at this path. Stop every writer of it and check "
            f"{storage.uri(TABLE_FILE)}.",
            table=storage.root_uri,
        )
    known = {canonical_uri(uri) for uri in current.root_uris}
    if canonical_uri(storage.root_uri) in known:
        return current
    updated = replace(current, other_root_uris=(*current.other_root_uris, storage.root_uri))
    storage.atomic_write(TABLE_FILE, encode_record(updated.to_json(), version=updated.file_version))
    return updated


@dataclass(frozen=True)
class TableSpec:
    """What a writer's configuration says the table is.

    A new table's identity is made from it; an existing table's identity is checked against it
    (``check``) before the writer reads, rolls forward or deletes anything, because the layout
    a writer reads the table with (manifest directory, compact interval) comes from it: a
    writer whose spec the table refuses must not recover the table through the wrong layout."""

    kind: str = "table"
    compact_interval: int = 10
    format: str = "parquet"
    partition_by: tuple[str, ...] = ()
    writer_options: tuple[tuple[str, str], ...] = ()
    delta: bool = False
    spark_manifest: bool = True
    #: A member table: the way up to its group's root (``TableIdentity.group``).
    group: str | None = None
    #: ``format="iceberg"``: where the table's Iceberg metadata is recorded; None: no Iceberg table.
    iceberg: IcebergCatalogRef | None = None

    @property
    def table_formats(self) -> tuple[str, ...]:
        return (*(("delta",) if self.delta else ()), *(("iceberg",) if self.iceberg is not None else ()))

    @property
    def manifest_dir(self) -> str:
        return SPARK_MANIFEST_DIR if self.spark_manifest else PRIVATE_MANIFEST_DIR

    def new_identity(self, storage: Storage, *, first_batch_id: int = 0) -> TableIdentity:
        table_id = str(uuid.uuid4())
        return TableIdentity(
            table_id=table_id,
            root_uri=storage.root_uri,
            created_ms=int(time.time() * 1000),
            compact_interval=self.compact_interval,
            format=self.format,
            partition_by=self.partition_by,
            first_batch_id=first_batch_id,
            writer_options=dict(self.writer_options),
            kind=self.kind,
            group=self.group,
            delta_app_id=delta_app_id(table_id) if self.delta else None,
            spark_manifest=self.spark_manifest,
            iceberg=IcebergIdentity(iceberg_app_id(table_id), self.iceberg) if self.iceberg is not None else None,
        )

    def check(self, existing: TableIdentity, root: str) -> None:
        """Raise ``ConfigError`` naming the first setting the table at ``root`` refuses."""
        if existing.kind != self.kind:
            raise ConfigError(_kind_mismatch(root, existing, self.kind), table=root)
        if existing.compact_interval != self.compact_interval:
            raise ConfigError(
                f"Table {root} was created with compact_interval={existing.compact_interval}, but this writer is "
                f"configured with compact_interval={self.compact_interval}. The interval is fixed for the life of a "
                f"table (its .compact file names depend on it): configure compact_interval={existing.compact_interval}, "
                "or write to a new table.",
                key="compact_interval",
                table=root,
            )
        if self.partition_by != existing.partition_by:
            raise SchemaMismatchError(
                f"Table {root} is partitioned by {list(existing.partition_by)}, but the sink was "
                f"configured with partition_by={list(self.partition_by)}. Use the table's partitioning or a new table.",
                table=root,
                key="partition_by",
                mismatches=[
                    {
                        "column": "(partition columns)",
                        "table": str(list(existing.partition_by)),
                        "batch": str(list(self.partition_by)),
                        "problem": "other partition columns",
                        "kind": "partitioning",
                    }
                ],
            )
        if existing.format != self.format:
            raise ConfigError(
                f"Table {root} holds {existing.format!r} files, but the sink was configured with "
                f"format={self.format!r}. Use format={existing.format!r} or write to a new table.",
                table=root,
                key="format",
            )
        if existing.table_formats != self.table_formats:
            raise ConfigError(_formats_mismatch(root, existing, self.table_formats), table=root, key="format")
        if existing.iceberg is not None and self.iceberg is not None and existing.iceberg.catalog != self.iceberg:
            raise ConfigError(_catalog_mismatch(root, existing.iceberg.catalog, self.iceberg), table=root, key="iceberg_catalog")
        if existing.spark_manifest != self.spark_manifest:
            raise ConfigError(
                f"Table {root} keeps its manifest in {existing.manifest_dir}/, but the sink was configured with "
                f"spark_manifest={self.spark_manifest}. Where the manifest lives is fixed for the life of a table: configure "
                f"spark_manifest={existing.spark_manifest}, or write to a new table.",
                table=root,
                key="spark_manifest",
            )


def check_identity(storage: Storage, spec: TableSpec) -> TableIdentity | None:
    """The table's identity, checked against ``spec``; None for a table without one (new, or
    written by Spark's own file sink)."""
    existing = read_identity(storage)
    if existing is not None:
        spec.check(existing, storage.root_uri)
    return existing


def refuse_another_spelling(storage: Storage, identity: TableIdentity | None) -> None:
    """Refuse a writer at a new spelling of a recorded root that is the same local directory (a
    symbolic link to it, or from it). Its batches' manifest entries would name a second root, and
    Spark's readers keep only the files under the path they are given: ``spark.read`` of either
    spelling would miss the other's rows (this library's readers map every recorded root; a
    table moved to another directory is a new root, not refused). Runs before anything is
    read, rolled forward or written through the new spelling."""
    if identity is None or storage.scheme != "file":
        return
    known = {canonical_uri(uri) for uri in identity.root_uris}
    if canonical_uri(storage.root_uri) in known:
        return
    for root in identity.root_uris:
        if root.startswith("file:") and same_local_directory(root, storage.root_uri):
            raise IdentityError(
                f"{storage.root_uri} is the table {root} reached through a symbolic link. Batches written under this "
                f"spelling would be listed under a second root, and Spark's readers keep only the files under the path "
                f"they are given: spark.read of {root} would miss their rows. Write (and read) the table as {root}.",
                table=storage.root_uri,
            )


def ensure_identity(storage: Storage, spec: TableSpec, *, first_batch_id: int = 0) -> TableIdentity:
    """Read the identity, or create it (exclusively) for a new table; check it matches."""
    existing = check_identity(storage, spec)
    if existing is not None:
        return existing
    identity = spec.new_identity(storage, first_batch_id=first_batch_id)
    try:
        storage.put_if_absent(TABLE_FILE, encode_record(identity.to_json(), version=identity.file_version))
    except FileExistsError:  # another writer created it first: use theirs
        existing = check_identity(storage, spec)
        assert existing is not None
        return existing
    return identity


_LOGS = {"delta": "a Delta log", "iceberg": "an Iceberg table"}


def _formats_text(formats: tuple[str, ...], file_format: str) -> str:
    if not formats:
        return repr(file_format)
    return repr(formats[0]) if len(formats) == 1 else repr(list(formats))


def _formats_mismatch(root: str, existing: TableIdentity, wanted: tuple[str, ...]) -> str:
    """A restart with other table formats than the table's (``delta``, ``iceberg``)."""
    have = _formats_text(existing.table_formats, existing.format)
    missing = [f for f in existing.table_formats if f not in wanted]
    if missing:
        return (
            f"Table {root} is published to {' and '.join(_LOGS[f] for f in existing.table_formats)} by this library (format="
            f"{have}), but the sink was configured with format={_formats_text(wanted, existing.format)}: its batches would "
            f"be missing from {_LOGS[missing[0]]}. Use format={have}."
        )
    added = [f for f in wanted if f not in existing.table_formats][0]
    return (
        f"Table {root} was written without {_LOGS[added]} (format={have}); {_LOGS[added]} started now would miss every "
        f"earlier batch. Keep format={have}, or write format={_formats_text(wanted, existing.format)} to a new table."
    )


def _catalog_mismatch(root: str, existing: IcebergCatalogRef, wanted: IcebergCatalogRef) -> str:
    def where(ref: IcebergCatalogRef) -> str:
        return "its own metadata files (no catalog)" if ref.name is None else f"catalog {ref.name!r} as {ref.identifier!r}"

    return (
        f"The Iceberg table of {root} is recorded in {where(existing)}, but the sink was configured with {where(wanted)}. "
        "Where the Iceberg table is recorded is fixed for the life of a table (a second catalog entry would miss every "
        "earlier batch): configure the table's catalog and name again, or write to a new table."
    )


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
    return f"{root} is a single table written by ExactlyOnceSink, not a dataset group; a DatasetSink needs its own root directory."
