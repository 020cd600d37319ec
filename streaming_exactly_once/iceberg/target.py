"""``IcebergTarget``: one Iceberg table, as the commit protocol, the readers and upkeep use it.

Every manifest batch ``M`` of a ``format="iceberg"`` table becomes exactly one Iceberg snapshot
(an ``append``, written with pyiceberg, no JVM), whose commit also sets the table property
``seo.batch-id.<app id>`` to ``M``: a high-water mark that only grows and survives snapshot
expiry, so "is batch M in the table?" is answered from the current metadata file alone.
``commit`` never commits a batch twice (a lost race is never rebased onto the winner: the table
is read again and the commit built afresh) and only in order (batch ``M`` on a table whose mark
is ``M - 1``). ``check_batch`` (before the WAL claim) refuses a batch the table would not take.
``docs/design/iceberg-format.md`` has the argument and the bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import IcebergTableError, InvalidAsOfError
from ..storage.base import Storage
from .commit_names import batch_commit_uuid
from .engine import require, table_location
from .files import IcebergFile
from .settings import IcebergCatalogRef, IcebergSettings, batch_property

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger("streaming_exactly_once.iceberg")

#: Commits of one batch tried before giving up while other writers keep winning the race.
COMMIT_ATTEMPTS = 8

HINT = (
    "Iceberg readers read the table through this metadata; nothing was committed to it. Restore the file from "
    "a backup (or let the tool that damaged it repair it), then restart the query or run `seo recover <table>`."
)


class IcebergTarget:
    """The Iceberg table at ``storage`` for the app id of one table identity."""

    def __init__(
        self,
        storage: Storage,
        app: str,
        settings: IcebergSettings | None = None,
        catalog: IcebergCatalogRef | None = None,
        catalog_properties: Mapping[str, str] | None = None,
    ) -> None:
        require()
        self.storage = storage
        self.app_id = app
        self.settings = settings or IcebergSettings()
        self.catalog_ref = catalog or IcebergCatalogRef()
        self.location = table_location(storage)
        self._catalog_properties = dict(catalog_properties or {})
        self._catalog: Any = None  # catalogs.PathCatalog or ArbitratedCatalog, opened on first use
        self._table: Table | None = None  # the table as last read, brought up to date before each use
        self._unsynced: list[str] = []  # files of our last commit still to sync (a catalog's metadata file)
        self._expiring: list[int] = []  # snapshots the commit being made expires (``evolve``)

    @property
    def name(self) -> str:
        """The table as messages name it."""
        ref = self.catalog_ref
        return self.storage.root_uri if ref.name is None else f"{ref.name}:{ref.identifier} ({self.storage.root_uri})"

    # -- reading the table ---------------------------------------------------------------------

    def catalog(self) -> Any:
        """The one-table catalog commits go through (``catalogs``), opened on first use."""
        if self._catalog is None:
            from .catalogs import open_catalog

            self._catalog = open_catalog(self.storage, self.catalog_ref, self._catalog_properties)
        return self._catalog

    def load(self, *, refresh: bool = True) -> Table | None:
        """The table at its current metadata, or None if there is no Iceberg table yet.

        ``refresh=False`` reuses the table this object last read (within one commit step). A
        stale one never lets a batch in twice: its commit targets a version that exists already.
        """
        if self._table is not None and not refresh:
            return self._table
        from pyiceberg.exceptions import NoSuchTableError

        catalog = self.catalog()
        try:
            self._table = catalog.load_table()
        except NoSuchTableError:
            self._table = None
        except IcebergTableError:
            raise
        except Exception as exc:
            raise self.damaged(exc) from None
        return self._table

    def check_found(self) -> None:
        """Refuse a catalog-backed table its catalog does not know while its metadata files are
        there: this process's configuration of the catalog is not the sink's (a typo, another
        database). Taken for an empty table, its files would look unreferenced."""
        if self.catalog_ref.name is None or self.load() is not None:
            return
        found = [e.name for e in self.storage.list_dir("metadata") if e.name.endswith(".metadata.json")]
        if found:
            raise IcebergTableError(
                f"Catalog {self.catalog_ref.name!r} has no table {self.catalog_ref.identifier}, but {self.storage.uri('metadata')} "
                f"holds {len(found)} Iceberg metadata files (e.g. {sorted(found)[-1]}): this process's configuration of the "
                f"catalog (PYICEBERG_CATALOG__{self.catalog_ref.name.upper()}__*, ~/.pyiceberg.yaml) is not the one the sink "
                "writes to. Nothing was changed. Point it at the sink's catalog and run the command again.",
                table=self.storage.root_uri,
            )

    def forget(self) -> None:
        """Drop the cached table (the next ``load`` reads the metadata afresh)."""
        self._table = None

    def damaged(self, exc: BaseException) -> IcebergTableError:
        return IcebergTableError(
            f"The Iceberg table {self.name} does not load: {type(exc).__name__}: {_text(exc)}. {HINT}",
            table=self.storage.root_uri,
        )

    def hint_current(self) -> bool:
        """Whether path-based readers find the table as last read: its ``version-hint.text`` names
        the current metadata version (always true with a catalog, whose pointer is the truth)."""
        catalog = self.catalog()
        table = self._table
        if self.catalog_ref.name is not None or table is None:
            return True
        from .catalogs import _version_of

        return bool(catalog.hinted == _version_of(table.metadata_location))

    def hint_missing(self) -> int | None:
        """The version ``version-hint.text`` names if its metadata file is gone (path readers fail)."""
        from .catalogs import version_path

        hinted = None if self.catalog_ref.name is not None else self.catalog().hinted
        return int(hinted) if hinted is not None and not self.storage.exists(version_path(hinted)) else None

    def repair_hint(self) -> None:
        """Point the version hint at the current version where a writer died before it could."""
        if not self.hint_current() and self._table is not None:
            from .catalogs import _version_of

            self.catalog().write_hint(_version_of(self._table.metadata_location))

    def required_partition_columns(self) -> list[str]:
        """Partition source columns the current schema requires (a release before optional
        partition columns created them so; pyiceberg cannot read such a table: ``evolve``)."""
        table = self.load(refresh=False) or self.load()
        if table is None:
            return []
        schema = table.schema()
        return [schema.find_field(f.source_id).name for f in table.metadata.spec().fields if schema.find_field(f.source_id).required]

    def applied_batch(self, *, refresh: bool = True) -> int | None:
        """The newest manifest batch committed to the Iceberg table (its high-water mark), or None."""
        table = self.load(refresh=refresh)
        return None if table is None else _applied(table, self.app_id)

    def status(self) -> dict[str, Any]:
        table = self.load()
        if table is None:
            return {"snapshotId": None, "appId": self.app_id, "batchId": None, "metadata": None}
        return {
            "snapshotId": table.metadata.current_snapshot_id,
            "appId": self.app_id,
            "batchId": _applied(table, self.app_id),
            "metadata": table.metadata_location,
        }

    # -- before the WAL claim --------------------------------------------------------------------

    def check_batch(
        self,
        schema_json: str | None,
        partition_by: Sequence[str],
        *,
        refresh: bool = True,
        table_schema: str | None = None,
        advice: str | None = None,
    ) -> None:
        """Refuse, before anything is claimed, a batch the Iceberg commit could not take.
        ``table_schema``: the table's Spark schema after the batch, when the batch adds columns
        (its commit adds them, ``evolve``). ``advice``: what to do instead of the stream's advice
        (the check again inside the commit, where the batch is published already)."""
        from .batch_fit import check_batch_fits

        table = self.load(refresh=refresh)
        check_batch_fits(table, schema_json, partition_by, storage=self.storage, name=self.name, table_schema=table_schema, advice=advice)

    # -- the commit of one batch -------------------------------------------------------------------

    def commit(
        self,
        batch_id: int,
        files: Sequence[IcebergFile],
        *,
        schema_json: str | None,
        partition_by: Sequence[str],
        metadata: Mapping[str, str],
        fresh: bool = False,
        table_schema: str | None = None,
        rewrites: Sequence[tuple[Sequence[IcebergFile], IcebergFile]] = (),
        skipped: Callable[[int], bool] | None = None,
    ) -> int | None:
        """Commit ``files`` as manifest batch ``batch_id`` unless the table holds it already;
        a compaction batch's ``rewrites`` (the files each replaces, its new file) as a
        ``replace`` snapshot after the batch's append, in the same commit (``seo compact``'s
        batch, which adds no file, is the ``replace`` alone). ``skipped(done)``: whether the
        manifest batches after ``done`` and before ``batch_id`` hold no file
        (``manifest.empty_batches``: they have no snapshot of their own).

        Returns the id of the snapshot holding the batch (None if it could not be told apart,
        e.g. expired meanwhile). ``fresh``: the table was read by the caller within this step.
        See the module docstring for why this never commits one batch twice.
        """
        from .catalogs import LostRace

        last: BaseException | None = None
        for attempt in range(COMMIT_ATTEMPTS):
            table = self.load(refresh=attempt > 0 or not fresh)
            done = None if table is None else _applied(table, self.app_id)
            if done is not None and done >= batch_id:  # committed by another writer, which may have died unsynced
                found = self.snapshot_committing(batch_id)
                self._unsynced = [] if found is None else self.commit_files(found)
                self.repair_hint()
                return found
            self._check_follows(batch_id, done, table, skipped)
            fileio = self.catalog().fileio
            fileio.created.clear()
            try:
                committed = self._commit_once(table, batch_id, files, schema_json, partition_by, metadata, table_schema, rewrites)
            except LostRace as exc:
                log.info("Iceberg commit of batch %d to %s lost a race (%s); reading the table again", batch_id, self.name, exc)
                self._discard(fileio.created)
                last = exc
                self.forget()
                continue
            except IcebergTableError:
                raise
            except Exception as exc:
                self.forget()
                raise IcebergTableError(
                    f"Iceberg commit of manifest batch {batch_id} to {self.name} failed: {type(exc).__name__}: "
                    f"{_text(exc)}. The batch stays pending in the WAL and is committed when the sink restarts or "
                    "`seo recover <table>` runs.",
                    table=self.storage.root_uri,
                    batch_id=batch_id,
                ) from exc
            self._table = committed
            self._unsynced = self._catalog_metadata_file(committed)
            if self._expiring and table is not None:  # what only the expired snapshots named (``evolve``)
                from .evolve import expired_metadata
                from .fileio import relative_to

                expired = expired_metadata(committed.io, table.metadata, committed.metadata, self._expiring)
                self._discard([p for p in (relative_to(loc, fileio.roots) for loc in expired) if p is not None])
            return committed.metadata.current_snapshot_id
        raise IcebergTableError(
            f"Iceberg commit of manifest batch {batch_id} to {self.name} lost {COMMIT_ATTEMPTS} races in a row to other "
            f"writers of the table (last: {last}). Stop the other writers; the batch stays pending in the WAL and is "
            "committed at the next start.",
            table=self.storage.root_uri,
            batch_id=batch_id,
        )

    def _commit_once(
        self,
        table: Table | None,
        batch_id: int,
        files: Sequence[IcebergFile],
        schema_json: str | None,
        partition_by: Sequence[str],
        metadata: Mapping[str, str],
        table_schema: str | None = None,
        rewrites: Sequence[tuple[Sequence[IcebergFile], IcebergFile]] = (),
    ) -> Table:
        from pyiceberg.table import TableProperties

        from .datafiles import add_replace_snapshot, data_files
        from .evolve import evolve_schema, snapshots_to_expire
        from .schema import iceberg_schema, partition_spec

        # a table created or changed meanwhile must fit too
        self.check_batch(schema_json, partition_by, refresh=False, table_schema=table_schema, advice=published_advice(batch_id))
        properties = {batch_property(self.app_id): str(batch_id)}
        catalog = self.catalog()
        catalog.expire_with_next_commit([])
        self._expiring = []
        if table is None:
            assert schema_json is not None  # check_batch refused a first batch without one
            schema = iceberg_schema(table_schema or schema_json, table=self.name, optional=partition_by)
            txn = self.catalog().create_table_transaction(
                self.catalog().identifier,
                schema,
                location=self.location,
                partition_spec=partition_spec(schema, partition_by),
                properties=self.settings.table_properties(),
            )
        else:
            txn = catalog.slim(table).transaction()  # see catalogs: flat with history
            if TableProperties.MANIFEST_MERGE_ENABLED not in table.metadata.properties:
                # Iceberg's default (pyiceberg's is off): keeps the manifest list short
                properties[TableProperties.MANIFEST_MERGE_ENABLED] = "true"
            changed = evolve_schema(txn, schema_json, table_schema, partition_by, table=self.name)  # in this commit (``evolve``)
            if changed:
                log.info("Iceberg commit of batch %d to %s changes its schema: %s", batch_id, self.name, ", ".join(changed))
            if self.settings.snapshots_to_keep is not None:
                self._expiring = snapshots_to_expire(table.metadata, self.settings.snapshots_to_keep)
                catalog.expire_with_next_commit(self._expiring)
        if txn.table_metadata.name_mapping() is None:
            properties[TableProperties.DEFAULT_NAME_MAPPING] = txn.table_metadata.schema().name_mapping.model_dump_json()
        txn.set_properties(properties)
        summary = {f"seo.{k}": str(v) for k, v in metadata.items()}
        summary.update({"seo.app-id": self.app_id, "seo.batch-id": str(batch_id)})
        added = data_files(txn.table_metadata, self.location, files, table=self.name)
        if added or not rewrites:  # ``seo compact``'s batch (files rewritten, none added) is its replace alone
            with txn.update_snapshot(snapshot_properties=summary).merge_append() as append:
                append.commit_uuid = batch_commit_uuid(self.app_id, batch_id)  # names its files (``commit_names``)
                for data_file in added:
                    append.append_data_file(data_file)
        if rewrites:
            add_replace_snapshot(
                txn, rewrites, location=self.location, table=self.name, summary=summary, commit_uuid=batch_commit_uuid(self.app_id, batch_id)
            )
        committed: Table = txn.commit_transaction()
        return committed

    def _check_follows(self, batch_id: int, done: int | None, table: Table | None, skipped: Callable[[int], bool] | None = None) -> None:
        """Refuse to commit batch ``M`` unless the table's high-water mark is ``M - 1`` (none for
        ``M = 0``), or an earlier batch when every batch after it holds no file (``skipped``)."""
        expected = batch_id - 1
        held = -1 if done is None else done
        if held == expected or (held < expected and skipped is not None and skipped(held)):
            return
        where = "does not exist" if table is None else f"is at {table.metadata_location}"
        holds = "no batch of this table" if done is None else f"batches up to {done}"
        raise IcebergTableError(
            f"Iceberg commit of manifest batch {batch_id}: the Iceberg table {self.name} {where} and holds {holds} "
            f"(property {batch_property(self.app_id)}), but batches reach it in order and {expected} is the last one "
            "committed. Iceberg commits of this table were lost (an older metadata file restored, the catalog's "
            "pointer moved back, or the metadata deleted). Nothing was added; restore the table's metadata from a "
            "backup, then restart. `seo status` shows both logs.",
            table=self.storage.root_uri,
            batch_id=batch_id,
        )

    def _discard(self, paths: Sequence[str]) -> None:
        """Delete the files a commit that lost its race wrote: no metadata names them."""
        for path in paths:
            try:
                self.storage.delete(path)
            except Exception as exc:  # an orphan for `seo gc` then
                log.debug("deleting %s after a lost race: %s", path, exc)

    def finish_expiry(self) -> None:
        """After a writer that died between its commit and deleting what the commit's expiry left
        (``evolve.finish_expiry``): delete it now."""
        from .evolve import finish_expiry

        table = self.load()
        if table is not None:
            self._discard(finish_expiry(table, self.catalog().fileio.roots, self.storage.exists))

    def _catalog_metadata_file(self, table: Table) -> list[str]:
        """A real catalog wrote the metadata file with its own FileIO, which does not sync it."""
        if self.catalog_ref.name is None:
            return []
        from .fileio import relative_to

        path = relative_to(table.metadata_location, self.catalog().fileio.roots)
        return [] if path is None else [path]

    # -- durability --------------------------------------------------------------------------------

    def commit_files(self, snapshot_id: int) -> list[str]:
        """Files (relative paths) holding the snapshot: the current metadata file, the snapshot's
        manifest list and the manifests it added. For a roll-forward that syncs what a writer
        that died may have left unsynced."""
        from .fileio import relative_to

        table = self.load(refresh=False) or self.load()
        if table is None:
            return []
        from .history import snapshots_of_batch

        snapshot = table.metadata.snapshot_by_id(snapshot_id)
        locations = [table.metadata_location]
        # a compaction batch's commit adds two snapshots (its append and its replace)
        for s in snapshots_of_batch(table.metadata, self.app_id, snapshot) if snapshot is not None else ():
            locations.append(s.manifest_list)
            locations += [m.manifest_path for m in s.manifests(table.io) if m.added_snapshot_id == s.snapshot_id]
        roots = self.catalog().fileio.roots
        paths = [relative_to(loc, roots) for loc in locations]
        return [p for p in paths if p is not None and self.storage.exists(p)]

    def make_durable(self, paths: Sequence[str] | None = None) -> None:
        """Sync ``paths`` (default: what our last commit left unsynced). A file whose sync fails is
        written again under a new inode rather than synced again: Linux marks the pages of a
        failed fsync clean, so a second sync could succeed with the bytes never written."""
        paths = list(self._unsynced if paths is None else paths)
        self._unsynced = []
        if not paths:
            return
        try:
            self.storage.sync(paths)
        except FileNotFoundError:
            raise
        except OSError as exc:
            log.warning("syncing Iceberg files of %s failed (%s); writing them again", self.name, exc)
            for path in paths:
                self.storage.atomic_write(path, self.storage.read_bytes(path))

    # -- history: time travel and upkeep -------------------------------------------------------------

    def snapshot_committing(self, batch_id: int) -> int | None:
        """The id of the retained snapshot holding ``batch_id`` (None if expired or not ours)."""
        from .history import snapshot_of_batch

        table = self.load(refresh=False) or self.load()
        found = None if table is None else snapshot_of_batch(table.metadata, self.app_id, batch_id)
        return None if found is None else found.snapshot_id

    def snapshot_for_batch(self, batch_id: int, *, skipped: Callable[[int, int], bool] | None = None) -> int:
        """The snapshot that is the table as of manifest batch ``batch_id`` (``as_of=M``). A batch
        of no file has no snapshot of its own (``manifest.empty_batches``): the table as of it is
        the snapshot of the batch before it, taken when ``skipped(held, batch_id)`` says every
        batch after ``held`` up to it holds no file."""
        table = self.load()
        if table is None:
            raise InvalidAsOfError(f"as_of={batch_id}: {self.name} has no Iceberg table yet.", as_of=batch_id)
        newest = _applied(table, self.app_id)
        if skipped is not None and self.snapshot_committing(batch_id) is None:
            from .history import batch_of

            before = [(b, s.snapshot_id) for s in table.metadata.snapshots if (b := batch_of(s, self.app_id)) is not None and b < batch_id]
            held = max((b for b, _ in before), default=None)
            if held is not None and skipped(held, batch_id):
                return [sid for b, sid in before if b == held][-1]  # the batch's newest (a compaction batch's replace)
        if newest is None or newest < batch_id:
            raise InvalidAsOfError(
                f"as_of={batch_id}: manifest batch {batch_id} is not in the Iceberg table {self.name} (its newest batch "
                f"is {newest}); a pending commit finishes at the next start.",
                as_of=batch_id,
            )
        found = self.snapshot_committing(batch_id)
        if found is None:
            raise InvalidAsOfError(
                f"as_of={batch_id}: the Iceberg snapshot of batch {batch_id} is no longer in {self.name} (snapshot "
                "expiry removed it). `seo log <table>` lists the batches readable.",
                as_of=batch_id,
            )
        return found

    def batch_of_snapshot(self, snapshot_id: int) -> int | None:
        """The manifest batch a retained snapshot holds (None: not ours, or not retained)."""
        from .history import batch_of

        table = self.load(refresh=False) or self.load()
        snapshot = None if table is None else table.metadata.snapshot_by_id(snapshot_id)
        return None if snapshot is None else batch_of(snapshot, self.app_id)

    def referenced_files(self) -> set[str]:
        """Paths (relative to the table root) that a retained snapshot needs, and the retained
        metadata files (``history.retained_files``). Files outside the root are left out: they
        are not the sink's to delete."""
        from .fileio import relative_to
        from .history import retained_files

        table = self.load()
        if table is None:
            self.check_found()  # none, or a catalog configured elsewhere than the sink's
            return set()
        roots = self.catalog().fileio.roots
        found = (relative_to(loc, roots) for loc in retained_files(table.metadata, table.metadata_location, table.io))
        out = {p for p in found if p is not None}
        if self.catalog_ref.name is None:
            out.add("metadata/version-hint.text")
        return out

    def live_files(self, snapshot_id: int | None = None) -> list[IcebergFile]:
        """The data files of a snapshot (default: the current one), relative to the table root. A
        file outside the root raises: the manifest can only name files inside it."""
        from .fileio import relative_to
        from .history import snapshot_data_files

        table = self.load()
        if table is None:
            return []
        snapshot = table.metadata.current_snapshot() if snapshot_id is None else table.metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            return []
        roots = self.catalog().fileio.roots
        out = []
        for location, size, rows in snapshot_data_files(table.io, snapshot):
            rel = relative_to(location, roots)
            if rel is None:
                raise IcebergTableError(
                    f"Iceberg table {self.name} names a data file outside its root ({location}); the _spark_metadata "
                    "manifest can only name files inside it. Write with spark_manifest=False, or to a new table.",
                    table=self.storage.root_uri,
                )
            out.append(IcebergFile(rel, int(size), 0, int(rows)))
        return out

    def expire_snapshots(self, snapshot_ids: Sequence[int]) -> None:
        """Remove these snapshots from the table's metadata (one commit; the current snapshot and
        branch heads are never removed). The batch high-water mark stays: idempotence does not
        depend on them. Deleting the files only they named is the orphan rules' job."""
        from .catalogs import LostRace

        table = self.load()
        if table is None or not snapshot_ids:
            return
        try:
            table.maintenance.expire_snapshots().by_ids(list(snapshot_ids)).commit()
        except LostRace as exc:
            raise IcebergTableError(
                f"Iceberg snapshot expiry of {self.name} lost a race to a commit ({exc}); nothing was expired. Run it again.",
                table=self.storage.root_uri,
            ) from None
        finally:
            self.forget()


def published_advice(batch_id: int) -> str:
    """What to do when the Iceberg commit of a batch published in the manifest cannot be made:
    it cannot be discarded any more (Spark's readers may have read it)."""
    return (
        f"Manifest batch {batch_id} is published in the table's manifest already, so it cannot be discarded: another "
        "writer changed the Iceberg table since the check before the batch's claim. Restore its partition spec and "
        "columns as they were (or as the batch needs them), then restart the query or run `seo recover <table>`."
    )


def _applied(table: Table, app: str) -> int | None:
    value = table.metadata.properties.get(batch_property(app))
    return int(value) if value is not None and value.isdigit() else None


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


__all__ = ["IcebergTarget"]
