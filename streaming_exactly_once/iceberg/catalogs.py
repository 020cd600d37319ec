"""Where an Iceberg table's current metadata is recorded, and who arbitrates between writers.

Two kinds, behind the same three calls pyiceberg makes (``load_table``, ``create_table_transaction``,
``commit_table``), each a one-table ``Catalog`` that pyiceberg's transactions commit through:

* ``PathCatalog`` - the default, needs nothing running: the table's own ``metadata/v<N>.metadata.json``
  files. A commit writes version ``N + 1`` - the version after the one the transaction was
  built on, never a newer one - with our storage's create-if-absent write. That create is the
  commit's point of no return and the arbiter between two writers, exactly like Delta's
  ``_delta_log/N.json``. ``metadata/version-hint.text`` (the version's number, as Spark's Hadoop
  catalog writes it) is replaced after it, for path-based readers (pyiceberg ``StaticTable``,
  DuckDB, polars, Spark's Hadoop catalog); it is only a hint: the current version is the hinted
  one or any that follows it (one existence check per commit), and a missing or stale hint
  falls back to listing ``metadata/``.
* ``ArbitratedCatalog`` - any pyiceberg catalog by its properties (SQL on SQLite or PostgreSQL,
  REST, Glue, Hive): that catalog's own atomic swap arbitrates.

Neither ever rebases: a commit that lost its race raises ``LostRace`` (never pyiceberg's
``CommitFailedException``, which would make pyiceberg rebuild the snapshot on top of the winner
and commit the batch a second time). The caller reads the table again and decides.

Every file the transaction wrote (manifests, manifest list) is synced before the metadata that
names it is published (``StorageFileIO.publish``).

**Flat with history.** pyiceberg's ``Transaction`` recomputes its view of the table - a deep copy
of the whole metadata, every retained snapshot included - each time an append consults it
(about 17 times per commit: 0.6 s at 300 snapshots). ``slim`` hands the transaction the table
with only what an append reads (the current snapshot and branch heads, schemas, specs,
properties, sequence numbers); ``commit_table`` applies the resulting updates once to the full
metadata it read. So a commit costs one validation and one write of the metadata file (and
one parse where another writer moved the table: ``PathCatalog`` keeps the version it last read
or wrote, metadata files never change), whatever the history beyond what the file itself
holds. The old metadata files
``write.metadata.delete-after-commit.enabled`` retires are deleted here, against the full log.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any

from pyiceberg.catalog import Catalog, MetastoreCatalog
from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import ToOutputFile
from pyiceberg.table import CommitTableResponse, CreateTableTransaction, StagedTable, Table
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import AssertCreate, RemoveSnapshotsUpdate, TableRequirement, TableUpdate, update_table_metadata
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties

from ..errors import CatalogNotConfiguredError, IcebergTableError
from ..storage.base import Storage
from .engine import METADATA_DIR
from .fileio import StorageFileIO
from .settings import IcebergCatalogRef

log = logging.getLogger("streaming_exactly_once.iceberg")

HINT = f"{METADATA_DIR}/version-hint.text"
#: The identifier the path-based table goes by inside pyiceberg (it has no catalog name).
PATH_IDENTIFIER = ("streaming_exactly_once", "table")

_VERSION_FILE = re.compile(r"^v(\d+)\.metadata\.json$")
_ANY_METADATA = re.compile(r"\.metadata\.json(\.gz)?$|\.gz\.metadata\.json$")


class LostRace(Exception):
    """Another commit created the version (or swapped the pointer) first: ours did not land."""


def version_path(version: int) -> str:
    return f"{METADATA_DIR}/v{version}.metadata.json"


class _OneTable(NoopCatalog):
    """A catalog of one table whose commits go through ``fileio`` (see the module docstring)."""

    def __init__(self, name: str, fileio: StorageFileIO, identifier: Identifier) -> None:
        super().__init__(name)
        self.fileio = fileio
        self.identifier = identifier
        #: the full metadata of each ``slim`` table handed out, by its metadata location
        self._full: dict[str, TableMetadata] = {}
        #: snapshots the next ``commit_table`` also removes (``evolve``: the sink's expiry)
        self._expiring: list[int] = []

    def expire_with_next_commit(self, snapshot_ids: list[int]) -> None:
        """Make the next commit also remove these snapshots (applied to the full metadata)."""
        self._expiring = list(snapshot_ids)

    def _with_expiry(self, updates: tuple[TableUpdate, ...]) -> tuple[TableUpdate, ...]:
        ids, self._expiring = self._expiring, []
        return (*updates, RemoveSnapshotsUpdate.model_validate({"snapshot-ids": ids})) if ids else updates

    def slim(self, table: Table) -> Table:
        """``table`` with only what an append reads of its metadata, to build a transaction on."""
        metadata = table.metadata
        keep = {ref.snapshot_id for ref in metadata.refs.values()}
        snapshots = [s for s in metadata.snapshots if s.snapshot_id in keep or s.snapshot_id == metadata.current_snapshot_id]
        slim = metadata.model_copy(
            update={"snapshots": snapshots, "snapshot_log": [], "metadata_log": [], "statistics": [], "partition_statistics": []}
        )
        self._full = {table.metadata_location: metadata}
        return Table(table.name(), slim, table.metadata_location, self.fileio, self)

    def full_base(self, table: Table) -> TableMetadata:
        """The full metadata a transaction on ``table`` (possibly ``slim``) was built on."""
        return self._full.pop(table.metadata_location, table.metadata)

    def retire(self, base: TableMetadata, new: TableMetadata) -> None:
        """Delete the metadata files ``new`` no longer lists, where the table asks for it."""
        self._delete_old_metadata(self.fileio, base, new)

    def supports_server_side_planning(self) -> bool:
        return False

    def _first_metadata_location(self, location: str) -> str:
        raise NotImplementedError

    def create_table_transaction(
        self,
        identifier: str | Identifier,
        schema: Schema | Any,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> CreateTableTransaction:
        """A transaction creating the table at ``location``; committed, it is the table's first version."""
        if location is None:
            raise ValueError("the table's location is the sink's table directory")
        metadata = new_table_metadata(
            schema=schema, partition_spec=partition_spec, sort_order=sort_order, location=location, properties=dict(properties)
        )
        staged = StagedTable(
            identifier=self.identifier,
            metadata=metadata,
            metadata_location=self._first_metadata_location(location),
            io=self.fileio,
            catalog=self,
        )
        return CreateTableTransaction(staged)


class PathCatalog(_OneTable):
    """The table's own metadata files, arbitrated by create-if-absent (see the module docstring)."""

    def __init__(self, fileio: StorageFileIO) -> None:
        super().__init__("streaming-exactly-once", fileio, PATH_IDENTIFIER)
        self.storage = fileio.storage
        #: the metadata file the last successful ``commit_table`` created (relative path)
        self.committed: str | None = None
        #: the version ``version-hint.text`` named when the table was last read (None: no usable hint)
        self.hinted: int | None = None
        #: the metadata version this catalog last read or created, and its contents
        self._known: tuple[int, TableMetadata] | None = None

    def write_hint(self, version: int) -> None:
        """Point ``version-hint.text`` at ``version`` (after a commit, or where a writer died before
        it could). A failure is logged, never raised: it is only a hint."""
        try:
            self.storage.atomic_write(HINT, str(version).encode())
            self.hinted = version
        except Exception as exc:
            log.warning("writing %s failed (the commit stands): %s", self.storage.uri(HINT), exc)

    def _hint_committed(self, version: int) -> None:
        """Point the hint at the version this commit created - unless a later one exists: a
        writer frozen between its create and this write (a zombie past its lease) must not move
        the hint back under its successors. A successor's commit can land between the check and
        the write, so the check runs again after it and then points the hint at the newest - and
        so where this version is gone by then: a writer frozen inside its hint write while its
        successors went on until ``delete-after-commit`` retired this version and the next."""
        if self.storage.exists(version_path(version + 1)):
            return
        self.write_hint(version)
        if self.storage.exists(version_path(version + 1)) or not self.storage.exists(version_path(version)):
            newest = self.current_version()
            if newest is not None:
                self.write_hint(newest)

    def _first_metadata_location(self, location: str) -> str:
        return f"{location}/{version_path(1)}"

    # -- which version is current ----------------------------------------------------------------

    def _hinted(self) -> int | None:
        try:
            text = self.storage.read_bytes(HINT).decode("utf-8", "replace").strip()
        except FileNotFoundError:
            return None
        if text.endswith(".metadata.json"):
            text = text[: -len(".metadata.json")]
        text = text[1:] if text.startswith("v") else text
        return int(text) if text.isdigit() else None

    def _listed(self) -> int | None:
        versions = []
        foreign = []
        for entry in self.storage.list_dir(METADATA_DIR):
            match = _VERSION_FILE.match(entry.name)
            if match:
                versions.append(int(match.group(1)))
            elif _ANY_METADATA.search(entry.name):
                foreign.append(entry.name)
        if not versions and foreign:
            raise IcebergTableError(
                f"{self.storage.uri(METADATA_DIR)} holds Iceberg metadata files not named v<N>.metadata.json "
                f"(e.g. {sorted(foreign)[-1]}): the table is managed by a catalog, whose pointer says which file "
                "is current. Give the sink that catalog (iceberg_catalog=...) instead of the path-based default; "
                "nothing was written.",
                path=self.storage.uri(METADATA_DIR),
            )
        return max(versions) if versions else None

    def current_version(self) -> int | None:
        """The newest ``v<N>.metadata.json``: the hinted one or one after it (None: no table)."""
        version = self.hinted = self._hinted()
        if version is None or not self.storage.exists(version_path(version)):
            version = self._listed()
            if version is None:
                return None
        while self.storage.exists(version_path(version + 1)):
            version += 1
        return version

    def load_table(self, identifier: str | Identifier = PATH_IDENTIFIER) -> Table:
        version = self.current_version()
        if version is None:
            raise NoSuchTableError(f"no Iceberg table at {self.storage.root_uri}")
        return self.load_version(version)

    def load_version(self, version: int) -> Table:
        """The table at ``version``. A metadata file never changes once created, so the one this
        catalog last read or wrote is reused rather than parsed again (the current version is
        still found afresh: the hint, and whether a newer version exists)."""
        path = version_path(version)
        if self._known is not None and self._known[0] == version:
            metadata = self._known[1]
        else:
            metadata = TableMetadataUtil.parse_raw(self.storage.read_bytes(path).decode("utf-8"))
            self._known = (version, metadata)
        return Table(self.identifier, metadata, self.fileio.location_of(path), self.fileio, self)

    # -- committing --------------------------------------------------------------------------------

    def commit_table(self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]) -> CommitTableResponse:
        creating = any(isinstance(r, AssertCreate) for r in requirements)
        updates = self._with_expiry(updates)
        base: TableMetadata | None = None if creating else self.full_base(table)
        for requirement in requirements:
            requirement.validate(base)  # CommitFailedException: the transaction was built wrongly
        if base is None:
            version = 1
            metadata = update_table_metadata(MetastoreCatalog._empty_table_metadata(), updates, enforce_validation=True)
        else:
            version = _version_of(table.metadata_location) + 1
            # validated afresh instead of deep-copied (pyiceberg's default): the same result, a
            # tenth of the time at 1,000 snapshots, and the metadata written is checked once more
            metadata = update_table_metadata(base, updates, enforce_validation=True, metadata_location=table.metadata_location)
        self.fileio.publish()
        path = version_path(version)
        location = self.fileio.location_of(path)
        try:
            ToOutputFile.table_metadata(metadata, self.fileio.new_durable_output(location))
        except FileExistsError:
            if not self._ours(path, metadata):  # else a create that landed but answered "exists" (a retried PUT)
                raise LostRace(f"{self.storage.uri(path)} was created by another writer first") from None
        outrun = self._base_gone(version)
        if outrun and self._created_after_retirement(version, metadata):
            self.storage.delete(path)
            raise LostRace(f"{self.storage.uri(path)} was created after later versions retired it (a writer frozen mid-commit)")
        self.committed = path
        self._known = (version, metadata)
        if not outrun or self.storage.exists(path):  # else successors went on past it and retired it
            self._hint_committed(version)
        if base is not None:
            self.retire(base, metadata)
        return CommitTableResponse(metadata=metadata, metadata_location=location)  # type: ignore[call-arg]  # by field name, as pyiceberg does

    def _ours(self, path: str, metadata: TableMetadata) -> bool:
        """Whether the metadata file at ``path`` is the one this commit wrote (same table, time,
        snapshot and sequence number: snapshot ids are random 63-bit numbers)."""
        try:
            found = TableMetadataUtil.parse_raw(self.storage.read_bytes(path).decode("utf-8"))
        except Exception:  # unreadable: not a commit of ours that landed
            return False
        key = ("table_uuid", "last_updated_ms", "current_snapshot_id", "last_sequence_number")
        return all(getattr(found, k, None) == getattr(metadata, k, None) for k in key)

    def _base_gone(self, version: int) -> bool:
        """After creating ``v<version>``: whether other writers moved the table on meanwhile - the
        base ``v<version - 1>`` retired (for a first version: any other version file). One
        existence check in the usual case; ``_created_after_retirement`` then tells which way."""
        if version > 1:
            return not self.storage.exists(version_path(version - 1))
        return any(v != version for v in self._versions())

    def _created_after_retirement(self, version: int, metadata: TableMetadata) -> bool:
        """After creating ``v<version>``: whether the create came too late - a writer frozen
        between reading the table and its create, whose successors meanwhile committed that
        version themselves and went on until ``write.metadata.delete-after-commit`` deleted it,
        so the create found the slot free. Not so when later versions were built on the file
        this commit created (a writer frozen right after its create, its base retired since):
        the next version's metadata log names it, with its timestamp. Our file gone again:
        successors retired it, so it had landed. Retirement deletes the oldest versions first,
        so a file of ours still there while the next version is gone and later ones exist is one
        nobody built on."""
        if not self.storage.exists(version_path(version)):
            return False
        try:
            following = TableMetadataUtil.parse_raw(self.storage.read_bytes(version_path(version + 1)).decode("utf-8"))
        except FileNotFoundError:
            return any(v > version for v in self._versions())
        name = f"/{version_path(version).rsplit('/', 1)[-1]}"
        built_on_ours = any(e.metadata_file.endswith(name) and e.timestamp_ms == metadata.last_updated_ms for e in following.metadata_log)
        return not built_on_ours

    def _versions(self) -> list[int]:
        return [int(m.group(1)) for e in self.storage.list_dir(METADATA_DIR) if (m := _VERSION_FILE.match(e.name))]


class ArbitratedCatalog(_OneTable):
    """A real pyiceberg catalog's table, committed through it without pyiceberg's retries."""

    def __init__(self, inner: Catalog, identifier: Identifier, fileio: StorageFileIO) -> None:
        super().__init__(inner.name, fileio, identifier)
        self.inner = inner

    def _first_metadata_location(self, location: str) -> str:
        return f"{location}/{METADATA_DIR}/00000-{uuid.uuid4()}.metadata.json"  # the catalog picks the real one

    def load_table(self, identifier: str | Identifier = ()) -> Table:
        found = self.inner.load_table(self.identifier)
        return Table(self.identifier, found.metadata, found.metadata_location, self.fileio, self)

    def create_table_transaction(
        self,
        identifier: str | Identifier,
        schema: Schema | Any,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> CreateTableTransaction:
        namespace = Catalog.namespace_from(self.identifier)
        if namespace:
            try:
                self.inner.create_namespace_if_not_exists(namespace)
            except Exception as exc:  # e.g. created by a writer at the same instant: the create decides
                log.debug("creating namespace %s: %s", namespace, exc)
        return super().create_table_transaction(identifier, schema, location, partition_spec, sort_order, properties)

    def commit_table(self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]) -> CommitTableResponse:
        base = self.full_base(table)
        updates = self._with_expiry(updates)
        self.fileio.publish()
        try:
            response = self.inner.commit_table(table, requirements, updates)  # it applies them to its current metadata
        except (CommitFailedException, TableAlreadyExistsError) as exc:
            raise LostRace(f"catalog {self.inner.name}: {exc}") from None
        self.retire(base, response.metadata)
        return response


def require_configured(name: str, properties: Mapping[str, str], *, table: str) -> None:
    """Raise ``CatalogNotConfiguredError`` unless catalog ``name`` has properties here: given,
    or in pyiceberg's configuration (``PYICEBERG_CATALOG__<NAME>__*``, ``~/.pyiceberg.yaml``)."""
    from pyiceberg.utils.config import Config

    if properties or Config().get_catalog_config(name):
        return
    var = f"PYICEBERG_CATALOG__{name.upper()}"
    raise CatalogNotConfiguredError(
        f"Iceberg catalog {name!r} (table {table}) is not configured in this environment, so the table's Iceberg side "
        f"cannot be opened. Configure it as its writer did (iceberg_catalog_properties), with environment variables - "
        f"e.g. {var}__TYPE=sql and {var}__URI=sqlite:////data/catalog.db, or {var}__TYPE=rest and {var}__URI=https://... - "
        "or in ~/.pyiceberg.yaml. Nothing was read or changed.",
        catalog=name,
        table=table,
    )


def open_catalog(storage: Storage, ref: IcebergCatalogRef, properties: Mapping[str, str]) -> PathCatalog | ArbitratedCatalog:
    """The catalog of the table at ``storage``: its own metadata files (``ref.name`` None), or
    the pyiceberg catalog ``ref.name`` opened with ``properties`` (else pyiceberg's own
    configuration of it), holding the table ``ref.identifier``."""
    from pyiceberg.catalog import load_catalog

    fileio = StorageFileIO(storage)
    if ref.name is None:
        return PathCatalog(fileio)
    if not ref.identifier or "." not in ref.identifier:
        raise IcebergTableError(
            f"Iceberg catalog {ref.name!r}: the table identifier {ref.identifier!r} is not 'namespace.table'. Give the sink the "
            "table's full name in that catalog.",
            table=storage.root_uri,
        )
    require_configured(ref.name, properties, table=f"{ref.identifier} of {storage.root_uri}")
    try:
        inner = load_catalog(ref.name, **properties)
    except Exception as exc:
        raise IcebergTableError(
            f"Iceberg catalog {ref.name!r} does not open: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}. Check its "
            f"properties (given to the sink, or PYICEBERG_CATALOG__{ref.name.upper()}__* / ~/.pyiceberg.yaml); nothing was written.",
            table=storage.root_uri,
        ) from None
    return ArbitratedCatalog(inner, tuple(ref.identifier.split(".")), fileio)


def _version_of(metadata_location: str) -> int:
    match = _VERSION_FILE.match(metadata_location.rsplit("/", 1)[-1])
    if match is None:
        raise IcebergTableError(f"{metadata_location} is not a v<N>.metadata.json file", path=metadata_location)
    return int(match.group(1))
