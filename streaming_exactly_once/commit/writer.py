"""What every writer of a root does, a single table's (``commit.committer``) or a dataset
group's (``commit.groups.group_committer``): take the lease, recover, keep the state batches are
checked against, begin and abort attempts, and hand a planned sequence to the commit engine and
its leftovers to the housekeeping.

::

    open()        lease (epoch E) -> identity checked against the writer's spec -> recover()
                  -> identity written -> logs checked -> state loaded (latest batch, per query
                  the last Spark batch) - once per process and again after any failed batch
    per batch:    is_committed(Q, b)?  -> skip (Spark replayed it)
                  begin(Q, b)          -> M = latest + 1, a new attempt (nothing written)
                  ...the caller stages the data, plans the steps (what differs per kind)...
                  _run(...)            -> CommitEngine: sync staged, claim, fence, steps
                                          Housekeeping: claim drop, retention, preparation
                  _finish(...)         -> the state moves to M
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from ..checkpoint.offset_seq import OffsetSeq
from ..checkpoint.reader import InputFile
from ..delta.target import DeltaTarget
from ..errors import ConfigError, DeltaTableError, ExactlyOnceError, IcebergTableError, WriterFencedError
from ..iceberg.leftovers import discard_leftovers
from ..iceberg.target import IcebergTarget
from ..log.compactible_log import CompactibleLog
from ..manifest.empty_batches import holds_manifest
from ..storage.base import Storage
from ..storage.io_threads import OwnedPool
from ..table.attempt_key import AttemptKey
from ..table.commits_log import CommitRecord
from ..table.identity import TableIdentity, TableSpec, check_identity, ensure_identity, note_root, refuse_another_spelling
from ..table.layout import PROBE_DIR, SEO_DIR, staging_dir
from ..table.offsets_log import OffsetsRecord
from ..table.source_offsets import PartitionOffsetMap, merged_ends, raise_to, table_marks
from ..table.table_logs import TableLogs
from .adoption import existing_files_error, readable_files
from .background.housekeeping import Housekeeping, warm_up_in_background
from .background.janitor import Janitor
from .options import CommitterOptions
from .protocol.attempt import BatchAttempt, CommitResult, elapsed_ms
from .protocol.engine import CommitEngine
from .protocol.lease import Lease, fenced_cause
from .protocol.recovery import PublishedView, RecoveryReport, abort_attempt, check_logs_consistent, recover
from .protocol.sequence import CommitSequence
from .protocol.step import Distribute, StepContext
from .protocol.wal import CommitSequenceStore

log = logging.getLogger("streaming_exactly_once.commit")


class Writer(ABC):
    """One process's hold on a root, exactly once per (query id, Spark batch id)."""

    #: whether ``adopt_existing_files`` can take a new root's existing files (a group's cannot)
    ADOPTS_FILES = True

    def __init__(self, storage: Storage, options: CommitterOptions) -> None:
        self.storage = storage
        self.options = options
        #: what the root must be for this writer; checked against its identity before ``open``
        #: reads the logs laid out by it
        self.spec = self._spec()
        self.logs = TableLogs.for_identity(storage, self.spec, retention_ms=options.retention_ms, source_retention_ms=options.source_retention_ms)
        self.wal = CommitSequenceStore(storage)
        self.lease = Lease(storage, timeout_ms=options.lease_timeout_ms, description=options.description)
        self.housekeeping = Housekeeping(
            storage,
            self.wal,
            self.lease,
            min_batches_to_retain=options.min_batches_to_retain,
            cleanup_delay_ms=options.cleanup_delay_ms,
            prepare_compactions=options.prepare_compactions,
        )
        self.engine = CommitEngine(storage, self.wal, self.lease, self.housekeeping.gate, step_retries=options.step_retries)
        self.identity: TableIdentity | None = None
        self.latest_batch_id = -1
        self.last_recovery: RecoveryReport | None = None
        self._ready = False
        self._committed: dict[str, int] = {}
        self._table_rows: int | None = 0
        self._input_paths: set[str] | None = None
        self._offset_marks: PartitionOffsetMap | None = None
        #: per partition whose offsets restarted, the manifest batch that first wrote its new records
        self._offset_resets: dict[str, int] = {}
        #: per query, its latest offsets record (loaded with the marks)
        self._query_offsets: dict[str, OffsetsRecord] = {}
        #: set by a sink: runs a function over chunks of a list on the cluster (see StepContext)
        self.distribute: Distribute | None = None
        #: Delta logs by table (None: this root), kept across batches (``StepContext.delta_targets``)
        self.delta_targets: dict[str | None, DeltaTarget] = {}
        #: Iceberg tables likewise (``StepContext.iceberg_targets``); their catalogs stay open
        self.iceberg_targets: dict[str | None, IcebergTarget] = {}
        #: this writer's threads for what a commit overlaps (``storage.io_threads``)
        self.pool = OwnedPool("commit", 4)

    # -- what differs between a table and a dataset group -------------------------------------

    @abstractmethod
    def _spec(self) -> TableSpec:
        """What the root must be (its identity's kind, format, layout)."""

    @abstractmethod
    def _view(self) -> PublishedView:
        """How recovery tells a published batch (a table's manifest, a group's commit records)."""

    @abstractmethod
    def _forget_tables(self) -> None:
        """Before recovery: drop what is cached about the root's tables (recovery may publish)."""

    @abstractmethod
    def _load_state(self, newest: CommitRecord | None) -> None:
        """After recovery: what else the newest commit record holds (a group's datasets)."""

    @abstractmethod
    def _all_logs(self) -> list[CompactibleLog[Any]]:
        """Every log this writer keeps (its compactions are prepared, its work files discarded)."""

    @abstractmethod
    def _prepare(self) -> None:
        """One pass preparing the next compact files of the logs the last batch wrote."""

    def _check_untouched(self) -> None:
        """Before the lease: a directory this library never wrote to (no ``_seo/``, no manifest)
        that holds files readers of it read is refused (``commit.adoption``), nothing written."""
        if self.spec.table_formats or self.storage.list_dir(SEO_DIR) or self.storage.list_dir(self.spec.manifest_dir):
            return  # ours, Spark's own sink's, or a table format's: the check under the lease knows more
        files = readable_files(self.storage)
        if files and not self._adopts():
            raise existing_files_error(self.storage, files, adoptable=self.ADOPTS_FILES)

    def _check_directory(self) -> None:
        """Under the lease, after recovery: a root without a batch whose directory holds files
        readers read is refused (``commit.adoption``); a table adopts them instead."""
        if self.latest_batch_id < 0:
            files = readable_files(self.storage)
            if files:
                raise existing_files_error(self.storage, files, adoptable=self.ADOPTS_FILES)

    def _adopts(self) -> bool:
        """Whether this writer makes a new table's existing files its first batch."""
        return False

    def adopt_existing(self, schema: Callable[[], str]) -> None:
        """Before a table's first batch: publish the files its directory held as a batch of their
        own (``TableCommitter``). A dataset group adopts none: files that landed in its root since
        the writer opened it are refused, as at the open."""
        self.ensure_open()
        self._check_directory()

    def _may_discard_prepared(self) -> bool:
        """At a stop: whether this writer may delete the rewrites it prepared - it holds the table
        and no claim is pending (a pending claim may name them: its roll-forward moves them)."""
        return self.lease.holds() and not self.wal.pending()

    def _member_logs(self) -> Callable[[str], TableLogs] | None:
        """A dataset group's tables' logs, by path under the root (None: not a group)."""
        return None

    def _history_is_large(self) -> bool:
        """Whether compactions cost more than the imports of the first index build."""
        return False

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def epoch(self) -> int | None:
        return self.lease.epoch

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def janitor(self) -> Janitor:
        return self.housekeeping.janitor

    @property
    def preparation_owner(self) -> str:
        """Names this writer's compaction work files (``CompactionPreparation.owner``)."""
        return f"e{self.lease.epoch}"

    def _ctx(self) -> StepContext:
        return StepContext(
            storage=self.storage,
            logs=self.logs,
            move_threads=self.options.move_threads,
            epoch=self.lease.epoch,
            distribute=self.distribute,
            distribute_from=self.options.worker_moves_from,
            delta_targets=self.delta_targets,
            iceberg_targets=self.iceberg_targets,
            iceberg_catalogs=self._iceberg_catalogs(),
            member_logs=self._member_logs(),
        )

    def _iceberg_catalogs(self) -> dict[str, dict[str, str]]:
        """The properties of the Iceberg catalog the steps name (given at run time, never stored)."""
        name = self.options.iceberg_catalog.name
        return {} if name is None or not self.options.iceberg_catalog_properties else {name: dict(self.options.iceberg_catalog_properties)}

    def open(self) -> RecoveryReport:
        """Take the lease (if not held), recover, and load the state batches are checked against."""
        if self.lease.epoch is None:
            self._check_untouched()  # a directory of another tool's files: refused before anything is written
            # The lease, the WAL and every log rely on exclusive creates: make sure this endpoint
            # really has them before trusting it with one (cached per endpoint and bucket).
            self.storage.check_exclusive_create(PROBE_DIR)
            self.lease.acquire()
            if self.options.heartbeat:
                self.lease.start_heartbeat()
        self.lease.check_fence("recover")
        try:
            # A configuration the root refuses is refused before anything reads the logs
            # through it - recovery judges claims by the manifest this spec locates.
            refuse_another_spelling(self.storage, check_identity(self.storage, self.spec))
            self.housekeeping.quiesce(self._all_logs())  # the recovery discards their work anyway
            self._forget_tables()
            for log_ in self.logs.all_logs():
                log_.gaps()  # a stray file far beyond the latest batch is named before anything trusts "latest"
            self.housekeeping.adopt(self.logs.all_logs(), self.preparation_owner)
            report = self._recover()
            self.last_recovery = report
            self.latest_batch_id = report.latest_batch_id
            # A root reached through another spelling (a move, s3a://; a symlink is refused above)
            # gets entries under that root: record it so readers and gc know them all.
            self.identity = note_root(self.storage, ensure_identity(self.storage, self.spec, first_batch_id=self.latest_batch_id + 1))
            if self.identity.first_batch_id > 0 and self.logs.commits.latest_batch_id(refresh=True) is None:
                # Adopting a table written by Spark's own file sink: our logs start here.
                for log_ in (self.logs.require_offsets(), self.logs.commits, self.logs.require_sources()):
                    log_.write_empty_baseline(self.identity.first_batch_id - 1)
            check_logs_consistent(self.logs, self.latest_batch_id, self.identity.first_batch_id)
            self._check_targets()
            latest_records = self.logs.commits.latest_per_query()
            newest = max(latest_records.values(), key=lambda r: r.batch_id, default=None)
            self._check_directory()
            self._load_state(newest)
        except BaseException:
            # The root needs a person (the error says what to do): free it for `seo recover` at once.
            self.lease.release()
            raise
        self._committed = {q: r.spark_batch_id for q, r in latest_records.items()}
        self._table_rows = newest.table_rows if newest is not None else 0
        self._input_paths = None
        self._offset_marks = None
        self._offset_resets = {}
        self._query_offsets = {}
        self._ready = True
        # The next compaction's copy starts now, not after the first batch: the first one after
        # a start is otherwise left to its own batch.
        self.housekeeping.queue_preparation(self._prepare)
        if self._history_is_large():
            warm_up_in_background()
        if not report.clean:
            log.warning("recovery of %s: %s", self.storage.root_uri, report)
        return report

    def _recover(self) -> RecoveryReport:
        return recover(
            self.storage, self.logs, self.wal, self._ctx(), view=self._view(), retries=self.options.step_retries, fence=self.lease.check_fence
        )

    @property
    def delta(self) -> DeltaTarget | None:
        """This root's own Delta log (``format="delta"``, after ``open``); None otherwise."""
        if self.identity is None or self.identity.delta_app_id is None or self.options.delta is None:
            return None
        target = self.delta_targets.get(None)
        if target is None or target.app_id != self.identity.delta_app_id:
            target = self.delta_targets[None] = DeltaTarget(self.storage, self.identity.delta_app_id, self.options.delta)
        return target

    def _check_targets(self) -> None:
        """After recovery each table format's log holds exactly the manifest's batches (every batch
        whose manifest entry is published had its format commits rolled forward)."""
        delta, iceberg = self.delta, self.iceberg
        if delta is not None:
            self._check_follows_manifest("Delta log", delta.log_uri, "delta", delta.applied_batch, DeltaTableError, path=delta.log_uri)
        if iceberg is not None:
            iceberg.check_found()
            self._check_follows_manifest("Iceberg table", iceberg.name, "iceberg", iceberg.applied_batch, IcebergTableError)
            iceberg.repair_hint()  # where a writer died (or a zombie woke) between its commit and the hint
            if self.latest_batch_id >= 0:  # what commits killed by earlier writers left
                discard_leftovers(iceberg, self.latest_batch_id)

    def _check_follows_manifest(
        self, what: str, where: str, fmt: str, applied_batch: Callable[[], int | None], error: type[ExactlyOnceError], **context: Any
    ) -> None:
        assert self.identity is not None
        if self.identity.first_batch_id > 0:
            raise ConfigError(
                f"Table {self.storage.root_uri} was first written by Spark's own file sink (batches before "
                f"{self.identity.first_batch_id} have no records of this library), so its {what} would miss them. "
                f"Write format='{fmt}' to a new table.",
                table=self.storage.root_uri,
                key="format",
            )
        applied = applied_batch()
        if not holds_manifest(applied, self.latest_batch_id, self.logs.require_manifest()):
            applied = -1 if applied is None else applied
            raise error(
                f"The {what} {where} holds batches up to {applied} of table {self.storage.root_uri}, but its "
                f"manifest holds batches up to {self.latest_batch_id} and no commit is pending. Readers of it and "
                "manifest readers would see different data. Restore it (or the manifest) from a backup; "
                "`seo status` shows both.",
                table=self.storage.root_uri,
                **context,
            )

    @property
    def iceberg(self) -> IcebergTarget | None:
        """This root's own Iceberg table (``format="iceberg"``, after ``open``); None otherwise."""
        if self.identity is None or self.identity.iceberg is None or self.options.iceberg is None:
            return None
        ours = self.identity.iceberg
        target = self.iceberg_targets.get(None)
        if target is None or target.app_id != ours.app_id or target.catalog_ref != ours.catalog:
            target = self.iceberg_targets[None] = IcebergTarget(
                self.storage, ours.app_id, self.options.iceberg, ours.catalog, self._iceberg_catalogs().get(ours.catalog.name or "")
            )
        return target

    def invalidate(self) -> None:
        """After a failed batch: the next ``ensure_open`` recovers before anything else."""
        self._ready = False

    def ensure_open(self) -> None:
        if not self._ready or self.lease.epoch is None:  # the lease may have been given up
            self.open()

    def close(self) -> None:
        self.housekeeping.close(self._all_logs())
        self.lease.release()
        self.pool.close()
        self._ready = False

    # -- state -------------------------------------------------------------------------------

    def last_spark_batch(self, query_id: str) -> int | None:
        return self._committed.get(query_id)

    def is_committed(self, query_id: str, spark_batch_id: int) -> bool:
        last = self._committed.get(query_id)
        return last is not None and spark_batch_id <= last

    def committed_offsets(self, query_id: str, spark_batch_id: int) -> tuple[str | None, ...] | None:
        """The source offsets the root recorded for Spark batch ``spark_batch_id`` of ``query_id``
        (its offsets log, searched from the newest batch down), or None if no record is near."""
        record = self.logs.require_offsets().find(query_id, spark_batch_id, newest=self.latest_batch_id)
        return None if record is None else tuple(record.source_offsets)

    def knows_query(self, query_id: str) -> bool:
        return query_id in self._committed

    def spark_sink_batches(self) -> int:
        """How many batches Spark's own file sink wrote before this root was adopted, while no
        query has committed one through us yet (then 0: the query that moved here is known)."""
        if self._committed or self.identity is None:
            return 0
        return self.identity.first_batch_id

    def committed_input_paths(self) -> set[str]:
        """Every input file the root has committed (loaded on first use, then kept current)."""
        if self._input_paths is None:
            self._input_paths = self.logs.require_sources().committed_paths()
        return self._input_paths

    def offset_marks(self) -> PartitionOffsetMap:
        """The high-water mark of every partitioned source's partition the root committed
        (``table.source_offsets``; loaded on first use, then kept current)."""
        if self._offset_marks is None:  # every record: a rebuilt one may carry no offsets
            log_ = self.logs.require_offsets()
            records = log_.all_records()
            self._offset_marks = table_marks(records)
            self._offset_resets = {}
            for record in records:
                for name, batch in record.offset_resets.items():
                    self._offset_resets[name] = max(batch, self._offset_resets.get(name, batch))
            self._query_offsets = dict(log_.latest_per_query())
        return self._offset_marks

    def query_offsets(self, query_id: str) -> OffsetsRecord | None:
        """The offsets record of the last batch the root committed for ``query_id``."""
        self.offset_marks()
        return self._query_offsets.get(query_id)

    def query_records(self) -> list[OffsetsRecord]:
        """The offsets record of the last batch the root committed, for every query it knows."""
        self.offset_marks()
        return list(self._query_offsets.values())

    # -- attempts ----------------------------------------------------------------------------

    def begin(
        self,
        query_id: str,
        spark_batch_id: int,
        *,
        mode: str,
        checkpoint: str | None = None,
        offsets: OffsetSeq | None = None,
        spark_query_id: str | None = None,
        offset_resets: Iterable[str] = (),
    ) -> BatchAttempt:
        """A new attempt at Spark batch ``spark_batch_id`` of ``query_id``; ``spark_query_id``:
        the checkpoint's own id, when the query id was given instead; ``offset_resets``: the
        partitions whose offsets restarted (their marks restart at this batch)."""
        self.ensure_open()
        self.lease.check_fence("stage")
        t0 = time.perf_counter()
        batch_id = self.latest_batch_id + 1
        token = uuid.uuid4().hex[:8]
        key = AttemptKey(batch_id, query_id, spark_batch_id, self.lease.epoch or 0, token, mode)
        attempt = BatchAttempt(
            key=key,
            staging_dir=staging_dir(batch_id, token, key.epoch),
            offsets=OffsetsRecord.of(
                key,
                checkpoint=checkpoint,
                source_offsets=tuple(offsets.offsets) if offsets else (),
                batch_watermark_ms=offsets.batch_watermark_ms if offsets else None,
                batch_timestamp_ms=offsets.batch_timestamp_ms if offsets else None,
                written_ms=int(time.time() * 1000),
                spark_query_id=spark_query_id if spark_query_id != query_id else None,
                offset_resets=self._carried_resets(batch_id, offset_resets, offsets),
            ),
        )
        attempt.timings["intent"] = elapsed_ms(t0)
        return attempt

    def _carried_resets(self, batch_id: int, resets: Iterable[str], offsets: OffsetSeq | None) -> dict[str, int]:
        """Every offset reset the root knows, and ``resets`` at ``batch_id``, for a batch of a
        partitioned source: each such record carries them all, so a compact file that keeps only
        the latest records keeps them too."""
        new = set(resets)
        if not new and (offsets is None or not merged_ends(offsets.offsets)):
            return {}
        self.offset_marks()
        return dict(sorted({**self._offset_resets, **{name: batch_id for name in new}}.items()))

    @contextlib.contextmanager
    def batch(self, query_id: str, spark_batch_id: int, **intent: Any) -> Iterator[BatchAttempt]:
        """One attempt at a batch (``intent``: the keyword arguments of ``begin``), as a block::

            with committer.batch(query_id, spark_batch_id, mode="rename") as attempt:
                files = write_the_data_under(attempt.staging_dir)
                result = committer.commit(attempt, files, num_rows=n)

        If the block raises before the attempt's claim, the attempt is aborted (``abort``) and
        the error goes on. A claimed attempt is never aborted: it can only roll forward."""
        attempt = self.begin(query_id, spark_batch_id, **intent)
        try:
            yield attempt
        except BaseException as exc:
            self.abort(attempt)
            fenced = self.fenced_cause_of(exc)
            if fenced is not None:
                raise fenced from exc
            raise

    def fenced_cause_of(self, exc: BaseException) -> WriterFencedError | None:
        """The ``WriterFencedError`` behind an attempt that failed before its claim, if this writer
        was fenced meanwhile: the successor changed the table under the frozen writer - its
        recovery removed the staging directory (the write fails with whatever the storage says
        about a missing directory), its retention removed manifest files a compaction batch's
        plan reads (``MissingBatchError``)."""
        if not isinstance(exc, Exception) or isinstance(exc, WriterFencedError):
            return None
        try:
            return fenced_cause(self.storage, self.lease.epoch, "stage")
        except Exception:  # never mask the real error
            return None

    def abort(self, attempt: BatchAttempt) -> None:
        """Best-effort removal of an attempt that will not commit: only its own staging directory
        (and, in direct mode, the files its intents name), whoever holds the root by now."""
        try:
            claim = self.wal.get(attempt.batch_id)
            if claim is not None and claim.attempt == attempt.attempt:
                return  # claimed: this batch may only roll forward (recovery does it)
            abort_attempt(self.storage, attempt.staging_dir)
        except Exception:  # recovery at the next start does the same; never mask the real error
            log.exception("could not clean up attempt %s of batch %d", attempt.attempt, attempt.batch_id)

    # -- a planned commit --------------------------------------------------------------------

    def _run(
        self,
        attempt: BatchAttempt,
        seq: CommitSequence,
        t_plan: float,
        *,
        retention: Iterable[tuple[CompactibleLog[Any], int]],
        indexes: Iterable[tuple[object, Callable[[], None]]] = (),
        leftovers: Callable[[], Iterable[str]] = tuple,
        synced: frozenset[str] = frozenset(),
    ) -> StepContext:
        """Commit ``seq`` (the engine), then leave what follows to the housekeeping; ``leftovers``
        (once the batch committed) names staging directories to delete after its claim;
        ``synced``: staged files whose bytes the writer synced already."""
        ctx = self._ctx()
        ctx.staged_synced = synced
        ctx.pool = self.pool.get()
        ctx.defer_sync = True  # a fresh commit: the claim can rebuild the bookkeeping records
        ctx.timings.update(attempt.timings)
        ctx.timings["plan"] = elapsed_ms(t_plan)
        self.engine.run(seq, ctx)
        self.housekeeping.batch_committed(seq, ctx, retention=retention, prepare=self._prepare, indexes=indexes, leftovers=leftovers())
        return ctx

    def _finish(self, attempt: BatchAttempt, record: CommitRecord, input_files: Sequence[InputFile], ctx: StepContext) -> CommitResult:
        """Bring the in-memory state up to the batch just committed."""
        self.latest_batch_id = record.batch_id
        self._table_rows = record.table_rows
        self._committed[attempt.query_id] = attempt.spark_batch_id
        if self._input_paths is not None:
            self._input_paths.update(i.path for i in input_files)
        if self._offset_marks is not None:
            written = attempt.offsets_step(record.batch_id).record
            resets = {name for name, batch in written.offset_resets.items() if batch == record.batch_id}
            raise_to(self._offset_marks, merged_ends(written.source_offsets), resets)
            self._offset_resets.update(written.offset_resets)
            self._query_offsets[attempt.query_id] = written
        self.housekeeping.keep_pace(self._all_logs(), ctx)
        if record.delta_version is None and record.iceberg_snapshot is None and ctx.notes:
            # the table formats' versions, as the commit record on disk has them (``WriteCommit``)
            record = replace(record, delta_version=ctx.notes.get("deltaVersion"), iceberg_snapshot=ctx.notes.get("icebergSnapshot"))
        return CommitResult(attempt.query_id, attempt.spark_batch_id, "committed", record.batch_id, record, dict(ctx.timings))
