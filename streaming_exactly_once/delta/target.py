"""``DeltaTarget``: one table's Delta log, as the commit protocol and the readers use it.

Every manifest batch ``M`` becomes exactly one Delta commit carrying Delta's application
transaction ``(app id, M)``, so "is batch M in the Delta table?" is answered from the log alone;
commits land in batch order, never twice (delta-rs' own retries off, a lost race re-read). Why
each rule holds, and the known limit of delta-rs, are in ``docs/design/delta.md``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from ..errors import DeltaTableError, InvalidAsOfError
from ..storage.base import Storage
from .batch_fit import check_batch_fits
from .engine import deltalake, object_store_options, table_uri
from .evolve import commit_lines, evolves, write_commit
from .files import DeltaFile, add_actions
from .log_actions import lost_race, ms_since_epoch, relative_to_root, root_spellings, txn_in_commit, txn_version
from .log_snapshot import LogSnapshot, unloadable_version_cause
from .schema import fields_of
from .settings import APP_ID_PREFIX, DeltaSettings, app_id, cleanup_due

log = logging.getLogger("streaming_exactly_once.delta")

LOG_DIR = "_delta_log"
#: Keys of our entries in a Delta commit's ``commitInfo`` (strings: every Delta reader shows them).
BATCH_KEY = "seoBatchId"
APP_KEY = "seoAppId"
#: delta.checkpointInterval where a table does not set it (delta-rs checkpoints every 100 versions then).
DELTA_DEFAULT_CHECKPOINT_INTERVAL = 100
#: Loads tried for one background checkpoint (``write_checkpoint``).
CHECKPOINT_ATTEMPTS = 3
#: Commits of one batch tried before giving up while other writers keep winning the race.
COMMIT_ATTEMPTS = 8

_COMMIT_FILE = re.compile(r"^\d{20}\.(json|checkpoint\.parquet|checkpoint\.\d{10}\.\d{10}\.parquet)$")

HINT = (
    "Delta readers (delta-spark, delta-rs, Trino, DuckDB, polars) read the table through this log; nothing "
    "was committed to it. Restore the file from a backup (or let the tool that damaged it repair it), then "
    "restart the query or run `seo recover <table>`."
)


@dataclass(frozen=True)
class _Batch:
    """What one batch's Delta commit writes, whichever way it is written."""

    batch_id: int
    files: Sequence[DeltaFile]
    actions: Any  # delta-rs add actions of ``files``
    info: dict[str, str]  # the commit's commitInfo
    schema_json: str | None
    partition_by: Sequence[str]
    table_schema: str | None
    removed: Sequence[DeltaFile]
    rearranged: Sequence[DeltaFile]


class DeltaTarget:
    """The Delta log of the table at ``storage`` for the app id of one table identity."""

    def __init__(self, storage: Storage, app: str, settings: DeltaSettings | None = None) -> None:
        self.storage = storage
        self.app_id = app
        self.settings = settings or DeltaSettings()
        self.uri = table_uri(storage)
        self.options = object_store_options(storage)
        self._table: Any = None  # the loaded DeltaTable, brought up to date before each use
        self._snapshot: LogSnapshot | None = None  # what the commit path reads, moved forward without listing
        self._cleaned_at: float | None = None  # when this process last ran the expired-log cleanup
        #: the version whose commit this object wrote with ``put_if_absent``, durable already
        self._written_durably: int | None = None

    @property
    def log_uri(self) -> str:
        return self.storage.uri(LOG_DIR)

    # -- reading the log ---------------------------------------------------------------------

    def _has_commits(self) -> bool:
        if any(_COMMIT_FILE.match(e.name) for e in self.storage.list_dir(LOG_DIR)):
            return True
        if self.storage.exists(LOG_DIR) and not self.storage.info(LOG_DIR).is_dir:
            raise DeltaTableError(
                f"{self.log_uri} is a file, not a directory: no Delta table can live at {self.storage.root_uri}. "
                "Move the file away (or write to another table); nothing was committed.",
                path=self.log_uri,
            )
        return False

    def load(self, *, refresh: bool = True) -> Any:
        """The table at its latest version, or None if there is no Delta table yet.

        ``refresh=False`` reuses the snapshot this object last brought up to date (within one
        commit step: each update lists ``_delta_log``, which on a local disk costs time in
        proportion to the files there). A stale snapshot never lets a batch in twice: delta-rs
        refuses a commit on top of an old version, and the log is then read again.
        """
        dl = deltalake()
        if self._table is not None and not refresh:
            return self._table
        if self._table is not None:
            try:
                self._table.update_incremental()
                return self._table
            except Exception:  # e.g. log files cleaned up under a long-idle snapshot: load afresh
                self._table = None
        if not self._has_commits():
            return None
        try:
            self._table = dl.DeltaTable(self.uri, storage_options=self.options or None)
        except Exception as exc:
            raise self.damaged(exc) from None
        return self._table

    def forget(self) -> None:
        """Drop the cached snapshots (the next ``load`` or ``snapshot`` reads the log afresh)."""
        self._table = None
        self._snapshot = None

    def snapshot(self, *, refresh: bool = True) -> LogSnapshot | None:
        """What a batch's commit needs of the newest version (``log_snapshot``), or None if there
        is no Delta table yet. Loaded through delta-rs once, then moved forward by reading the
        commit files after it: no listing of ``_delta_log`` per batch. ``refresh=False`` reuses it
        as it is (within one commit step)."""
        snap = self._snapshot
        if snap is not None and not refresh:
            return snap
        if snap is not None:
            try:
                snap = snap.advanced(self.storage, self.app_id)
            except (OSError, ValueError, TypeError, KeyError) as exc:  # a commit that does not parse
                log.debug("Delta log %s read forward failed (%s); loading it through delta-rs", self.log_uri, exc)
                snap = None
            if snap is not None:
                self._snapshot = snap
                return snap
        table = self.load()
        self._snapshot = None if table is None else LogSnapshot.of_table(table, self.app_id)
        return self._snapshot

    def damaged(self, exc: BaseException) -> DeltaTableError:
        text = " ".join(str(exc).split())[:300]
        return DeltaTableError(
            f"The Delta log {self.log_uri} does not load: {type(exc).__name__}: {text}. {HINT}",
            path=self.log_uri,
        )

    def applied_batch(self, *, refresh: bool = True) -> int | None:
        """The newest manifest batch committed to the Delta table (its ``txn`` version), or None."""
        snap = self.snapshot(refresh=refresh)
        return None if snap is None else snap.transaction_version(self.app_id)

    def status(self) -> dict[str, Any]:
        snap = self.snapshot()
        if snap is None:
            return {"version": None, "appId": self.app_id, "batchId": None}
        return {"version": snap.version, "appId": self.app_id, "batchId": snap.transaction_version(self.app_id)}

    # -- before the WAL claim ----------------------------------------------------------------

    def check_batch(self, schema_json: str | None, partition_by: Sequence[str], *, refresh: bool = True, table_schema: str | None = None) -> None:
        """Refuse, before anything is claimed, a batch the Delta commit could not take.
        ``table_schema``: the schema the batch gives the table (columns added), checked against
        Delta's rule for that (``evolve.check_evolution``) and then in place of the log's."""
        root, table = self.storage.root_uri, self.snapshot(refresh=refresh)
        check_batch_fits(table, schema_json, partition_by, root=root, log_uri=self.log_uri, table_schema=table_schema)

    # -- the commit of one batch ---------------------------------------------------------------

    def commit(
        self,
        batch_id: int,
        files: Sequence[DeltaFile],
        *,
        schema_json: str | None,
        partition_by: Sequence[str],
        metadata: dict[str, str],
        fresh: bool = False,
        table_schema: str | None = None,
        removed: Sequence[DeltaFile] = (),
        rearranged: Sequence[DeltaFile] = (),
        skipped: Callable[[int], bool] | None = None,
    ) -> int | None:
        """Commit ``files`` as manifest batch ``batch_id`` unless it is in the log already.
        ``skipped(done)``: whether the manifest batches after ``done`` and before ``batch_id``
        hold no file (``manifest.empty_batches``: they have no Delta commit of their own).

        Returns the Delta version holding the batch (None if it could not be told apart, e.g.
        after a foreign writer's commits). ``fresh``: the snapshot was brought up to date by the
        caller within this step (the first attempt does not list the log again). See the module
        docstring for why this never commits one batch twice.
        """
        dl = deltalake()
        batch = _Batch(
            batch_id,
            files,
            add_actions(files, partition_by, table=self.storage.root_uri),
            {**metadata, BATCH_KEY: str(batch_id), APP_KEY: self.app_id},
            schema_json,
            partition_by,
            table_schema,
            removed,
            rearranged,
        )
        last: BaseException | None = None
        for attempt in range(COMMIT_ATTEMPTS):
            snap = self.snapshot(refresh=attempt > 0 or not fresh)
            done = None if snap is None else snap.transaction_version(self.app_id)
            if done is not None and done >= batch_id:
                return self.version_committing(batch_id)
            self._check_follows(batch_id, done, snap, skipped)
            base = -1 if snap is None else snap.version
            try:
                version = self._write(dl, batch, snap, base)
            except DeltaTableError:
                raise
            except Exception as exc:
                if not lost_race(exc, dl):
                    raise DeltaTableError(
                        f"Delta commit of manifest batch {batch_id} to {self.log_uri} failed: {type(exc).__name__}: "
                        f"{' '.join(str(exc).split())[:300]}. The batch stays pending in the WAL and is committed "
                        "when the sink restarts or `seo recover <table>` runs.",
                        path=self.log_uri,
                        batch_id=batch_id,
                    ) from exc
                log.info("Delta commit of batch %d lost a race (%s); reading the log again", batch_id, type(exc).__name__)
                last = exc
                self.forget()
                continue
            if version is None:
                version = self.version_committing(batch_id)
            return version
        raise DeltaTableError(
            f"Delta commit of manifest batch {batch_id} to {self.log_uri} lost {COMMIT_ATTEMPTS} races in a row to "
            f"other writers of the Delta table (last: {last}). Stop the other writers; the batch stays pending in "
            "the WAL and is committed at the next start.",
            path=self.log_uri,
            batch_id=batch_id,
        )

    def _write(self, dl: Any, batch: _Batch, snap: LogSnapshot | None, base: int) -> int | None:
        """One attempt at the commit of ``batch`` as version ``base + 1``: the table's creation
        through delta-rs, or the commit written here (``evolve.commit_lines``, create-if-absent:
        a lost race is a ``FileExistsError``, never a retry on another version). Returns the
        version written (None if it cannot be told)."""
        if snap is None:
            self._create(dl, batch)
            return self._version_written(batch.batch_id, base)
        if batch.schema_json is not None:  # a table created meanwhile must fit too
            self.check_batch(batch.schema_json, batch.partition_by, refresh=False, table_schema=batch.table_schema)
        evolving = batch.table_schema is not None and evolves(snap.meta.schema_string, batch.table_schema)
        data = commit_lines(
            metadata=snap.meta,
            table_schema=batch.table_schema if evolving else None,
            app_id=self.app_id,
            batch_id=batch.batch_id,
            files=batch.files,
            info=batch.info,
            table=self.storage.root_uri,
            removed=batch.removed,
            rearranged=batch.rearranged,
        )
        write_commit(self.storage, base + 1, data)
        self._written_durably = base + 1
        self._snapshot = snap.applied(base + 1, data, self.app_id)
        return base + 1

    def _create(self, dl: Any, batch: _Batch) -> None:
        """The table's first version: its schema, partitioning and properties, and the batch."""
        if batch.schema_json is None:
            self.check_batch(None, batch.partition_by, refresh=False)
        tx = dl.transaction
        properties = tx.CommitProperties(
            custom_metadata=batch.info,
            max_commit_retries=0,
            # lastUpdated: delta-spark drops a txn without one where delta.setTransactionRetentionDuration is set
            app_transactions=[tx.Transaction(self.app_id, batch.batch_id, last_updated=int(time.time() * 1000))],
        )
        hooks = tx.PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
        # delta-rs makes the directory without syncing its name into the table's: made
        # here first, durably, a power cut cannot take the whole log with it
        self.storage.makedirs(LOG_DIR)
        tx.create_table_with_add_actions(
            self.uri,
            dl.Schema.from_json(batch.table_schema or batch.schema_json),
            batch.actions,
            mode="error",
            partition_by=list(batch.partition_by) or None,
            configuration=self.settings.table_properties(),
            storage_options=self.options or None,
            commit_properties=properties,
            post_commithook_properties=hooks,
        )
        self._snapshot = None  # read through delta-rs at the next use

    def _check_follows(self, batch_id: int, done: int | None, snap: LogSnapshot | None, skipped: Callable[[int], bool] | None = None) -> None:
        """Refuse to commit batch ``M`` unless the log's ``txn`` is ``M - 1`` (none for ``M = 0``),
        or an earlier batch when every batch after it holds no file (``skipped``).

        Batches reach the Delta log in order, one version each (batches of no file none), so
        anything else means the log lost commits it had: e.g. a ``N.json`` emptied by a power cut
        (delta-rs reads an empty commit file as a version without actions), or a ``txn`` dropped
        by a writer honouring ``delta.setTransactionRetentionDuration``. Committing on top would
        hide the loss from Delta readers for good; stopping here keeps it visible and repairable.
        """
        expected = batch_id - 1
        held = -1 if done is None else done
        if held == expected or (held < expected and skipped is not None and skipped(held)):
            return
        where = "has no Delta log" if snap is None else f"is at Delta version {snap.version}"
        holds = "no batch of this table" if done is None else f"batches up to {done}"
        raise DeltaTableError(
            f"Delta commit of manifest batch {batch_id}: the Delta log {self.log_uri} {where} and holds {holds} "
            f"(txn of app {self.app_id}), but batches reach it in order and {expected} is the last one committed. "
            "Delta commits of this table were lost (an emptied or deleted _delta_log/<version>.json, a restored "
            "older log, or a txn dropped by delta.setTransactionRetentionDuration). Nothing was added; restore "
            "the log from a backup, then restart. `seo status` shows both logs.",
            path=self.log_uri,
            batch_id=batch_id,
        )

    def _version_written(self, batch_id: int, base: int) -> int | None:
        """The version a successful commit on top of ``base`` wrote: ``base + 1`` if that commit
        file carries our ``txn`` for the batch (one read, where ``version_committing`` would list
        the log to bring the snapshot up to date; the snapshot is brought up to date at the next
        batch anyway). None if it does not (e.g. delta-rs retried the commit on a later version)."""
        if txn_in_commit(self._read_commit(base + 1), self.app_id) == batch_id:
            return base + 1
        return None

    def _read_commit(self, version: int) -> bytes | None:
        try:
            return self.storage.read_bytes(f"{LOG_DIR}/{version:020d}.json")
        except Exception as exc:  # cleaned up by log retention, or unreadable: the txn is what decides
            log.debug("Delta commit %d of %s unreadable: %s", version, self.log_uri, exc)
            return None

    def checkpoint_due(self, version: int | None) -> bool:
        """Whether ``version`` is one delta-rs's post-commit hook would checkpoint (versions
        ``k * delta.checkpointInterval - 1``): ``write_checkpoint`` is then due, off the batch's path."""
        snap = self._snapshot
        if snap is None or version is None:
            return False
        try:
            interval = int(snap.meta.configuration.get("delta.checkpointInterval", DELTA_DEFAULT_CHECKPOINT_INTERVAL))
        except ValueError:
            return False
        return interval > 0 and (version + 1) % interval == 0

    def write_checkpoint(self) -> None:
        """A checkpoint of the newest version, made durable, then Delta's expired-log cleanup when
        due (``settings.cleanup_due``). Runs in the background, after the batch that made it due.

        Both need the whole table state, which delta-rs loads (the latest checkpoint, one listing
        of ``_delta_log``, the commits after it): on the batch's path that was the one step of the
        commit growing with the log (58 ms at 100 versions, 644 ms at 10,000, local disk, loaded
        machine). The table is loaded here afresh, never shared with the commit thread. Its listing
        runs while the next batches write commits: a local directory read during a create may miss
        an entry (delta-rs then refuses the gap), so the load is tried again. The
        cleanup deletes only commits older than ``delta.logRetentionDuration`` that a checkpoint
        covers. A failure is logged, never raised: the batches are committed, and a later
        checkpoint covers them.
        """
        for attempt in range(CHECKPOINT_ATTEMPTS):
            try:
                table = deltalake().DeltaTable(self.uri, storage_options=self.options or None)
                version = int(table.version())
                table.create_checkpoint()
                self.make_durable(version)
                if cleanup_due(dict(table.metadata().configuration or {}), self._cleaned_at, time.monotonic()):
                    table.cleanup_metadata()
                    self._cleaned_at = time.monotonic()
                return
            except Exception as exc:  # e.g. a listing that missed a commit being written: read again
                if attempt + 1 == CHECKPOINT_ATTEMPTS:
                    log.warning("Delta checkpoint or log cleanup of %s failed (the batches are committed): %s", self.log_uri, exc)

    def commit_files(self, version: int) -> list[str]:
        """The files delta-rs wrote for ``version``: its JSON, and the checkpoint it made there."""
        files = [f"{LOG_DIR}/{version:020d}.json"]
        checkpoint = f"{LOG_DIR}/{version:020d}.checkpoint.parquet"
        if self.storage.exists(checkpoint):
            files += [checkpoint, f"{LOG_DIR}/_last_checkpoint"]
        return files

    def make_durable(self, version: int) -> None:
        """Sync what delta-rs wrote for ``version`` (it does not sync). A file whose sync fails
        is written again under a new inode rather than synced again: Linux marks the pages of a
        failed fsync clean, so a second sync could succeed with the bytes never written."""
        paths = [p for p in self.commit_files(version) if self.storage.exists(p)]
        if version == self._written_durably:  # its JSON was synced by the create-if-absent that wrote it
            paths = [p for p in paths if not p.endswith(".json")]
        if not paths:
            return
        try:
            self.storage.sync(paths)
        except FileNotFoundError:
            raise
        except OSError as exc:
            log.warning("syncing Delta version %d of %s failed (%s); writing its files again", version, self.log_uri, exc)
            for path in paths:
                self.storage.atomic_write(path, self.storage.read_bytes(path))

    def version_committing(self, batch_id: int, *, search: int = 8) -> int | None:
        """The Delta version whose commit carries ``batch_id``, looked up among the newest ones.

        Reads the newest ``_delta_log/<version>.json`` files for our ``txn`` action (reading only:
        delta-rs writes them). Not ``DeltaTable.history()``: delta-rs 1.x's history never
        returned against an S3 endpoint here (moto's server), and the answer is informational.
        """
        snap = self.snapshot()
        if snap is None:
            return None
        latest = snap.version
        for version in range(latest, max(-1, latest - search), -1):
            data = self._read_commit(version)
            if data is None:
                return None
            found = txn_in_commit(data, self.app_id)
            if found == batch_id:
                return version
            if found is not None and found < batch_id:
                return None  # older than the batch: it is not among these versions
        return None

    # -- time travel ---------------------------------------------------------------------------

    def _txn_at(self, version: int) -> int | None:
        """``txn`` of our app at Delta ``version`` (-1 if none); None if the version cannot be loaded."""
        try:
            table = deltalake().DeltaTable(self.uri, version=version, storage_options=self.options or None)
        except Exception:
            return None
        found = txn_version(table, self.app_id)
        return -1 if found is None else found

    def version_for_batch(self, batch_id: int, *, hint: int | None = None, skipped: Callable[[int, int], bool] | None = None) -> int:
        """The Delta version that is the table as of manifest batch ``batch_id``.

        ``hint``: the version the commit record noted (checked, not trusted). Otherwise a binary
        search over versions for the first whose ``txn`` reaches ``batch_id``: our txn version
        only grows, one batch per version. A batch of no file has no version of its own
        (``manifest.empty_batches``): the table as of it is the version of the batch before it,
        taken when ``skipped(held, batch_id)`` says every batch after ``held`` up to it holds no file.
        """
        if hint is not None and self._txn_at(hint) == batch_id:
            return hint
        table = self.load()
        if table is None:
            raise InvalidAsOfError(f"as_of={batch_id}: {self.storage.root_uri} has no Delta log yet.", as_of=batch_id)
        lo, hi = 0, table.version()
        newest = txn_version(table, self.app_id)
        if newest is not None and newest < batch_id and skipped is not None and skipped(newest, batch_id):
            return int(hi)
        if newest is None or newest < batch_id:
            raise InvalidAsOfError(
                f"as_of={batch_id}: manifest batch {batch_id} is not in the Delta table {self.storage.root_uri} (its "
                f"newest batch is {newest}); a pending commit finishes at the next start.",
                as_of=batch_id,
            )
        while lo < hi:
            mid = (lo + hi) // 2
            found = self._txn_at(mid)
            if found is None or found < batch_id:  # unloadable: older than the retained log
                lo = mid + 1
            else:
                hi = mid
        found = self._txn_at(lo)
        if found is not None and found > batch_id and lo > 0 and skipped is not None:
            held = self._txn_at(lo - 1)
            if held is not None and held < batch_id and skipped(held, batch_id):
                return lo - 1
        if found != batch_id:
            raise InvalidAsOfError(
                f"as_of={batch_id}: the Delta version of batch {batch_id} {unloadable_version_cause(self.storage)}: {self.log_uri}. "
                "`seo log <table>` lists the batches readable.",
                as_of=batch_id,
            )
        return lo

    # -- what gc must keep ---------------------------------------------------------------------

    def referenced_files(self) -> set[str]:
        """Paths (relative to the table root, unencoded) that a retained Delta version may read:
        the latest version's files and every file a ``remove`` still names (Delta's own vacuum
        decides when those may go)."""
        table = self.load()
        if table is None:
            return set()
        out: set[str] = set()
        roots = root_spellings(self.uri)
        for uri in table.file_uris():
            rel = relative_to_root(uri, roots)
            if rel is not None:
                out.add(rel)
        for path in table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True):
            out.add(relative_to_root(path, roots) or path)
        return out

    def live_files(self) -> list[DeltaFile]:
        """The latest version's files (relative, unencoded), e.g. of a table written before the sink
        adopted it. A file outside the table root raises: the manifest can only name files in it."""
        table = self.load()
        if table is None:
            return []
        import pyarrow as pa

        actions = pa.table(table.get_add_actions(flatten=True))
        out = []
        roots = root_spellings(self.uri)
        for path, size, mtime in zip(
            actions.column("path").to_pylist(),
            actions.column("size_bytes").to_pylist(),
            actions.column("modification_time").to_pylist(),
            strict=True,
        ):
            rel = relative_to_root(unquote(path), roots)
            if rel is None:
                raise DeltaTableError(
                    f"Delta table {self.storage.root_uri} names a data file outside its root ({path}); the "
                    "_spark_metadata manifest can only name files inside it. Write with spark_manifest=False, or "
                    "to a new table.",
                    table=self.storage.root_uri,
                )
            out.append(DeltaFile(rel, int(size), ms_since_epoch(mtime)))
        return out

    def schema_json(self) -> str | None:
        table = self.load()
        return None if table is None else table.schema().to_json()

    def columns(self) -> list[str]:
        schema = self.schema_json()
        return [f["name"] for f in fields_of(schema)] if schema else []


__all__ = ["APP_ID_PREFIX", "DeltaSettings", "DeltaTarget", "LOG_DIR", "app_id"]
