"""The per-batch commit protocol of one table, independent of Spark.

::

    open()      acquire lease (epoch E) -> recover() -> identity -> load state (latest L, per-query
                last Spark batch) - once per process and again after any failed batch
    per batch:
      is_committed(Q, b)?            -> skip: (query id, Spark batch id) already in the commits log
      begin(Q, b)                    -> M = L + 1; fence check; a new attempt (nothing written)
      ...the caller stages data...   -> rename mode: under _seo/staging/M-<attempt>/
                                        direct mode: final names, an intent file per data file
      commit(attempt, files)         -> check the batch's schema against the table's (commit.table_schema)
                                        build the sequence [move] [schema] manifest [delta] offsets sources commit cleanup
                                        put _seo/wal/M        (create-if-absent: the claim on M),
                                                              while the staged files are fsync'd
                                        fence check           (a writer fenced before it claimed stops here)
                                        run the steps         (manifest = the visibility point; then
                                                              offsets, sources and commit record at once,
                                                              the first two without waiting for the disk)
                                        L = M
                                        a background janitor fsyncs offsets/M and sources/M, deletes
                                        _seo/wal/M, then the staging leftovers, and applies retention
                                        to the four logs

Everything an attempt writes before its claim lives under its own staging directory (or, in
direct mode, is named by intents there), so abandoning an attempt never touches anything
another writer could own.

From the WAL write on, the batch only rolls forward (``commit.recovery``). Per-batch cost is a
fixed number of small create-if-absent writes plus one rename per file: the latest state lives
in memory and nothing lists a growing directory. What only waits on the disk overlaps, so a batch
waits for the durable writes it needs in order - the claim (with the staged bytes), the new
names, the manifest entry, the commit record - and little else: the offsets and sources records
are written beside the commit record without their fsync, which the janitor does before it
deletes the claim that can rebuild them (``CommitStep.sync_deferred``; until then a power cut may
cut them short, and the claim's roll-forward rewrites them). ``benchmarks/bench_commit.py``
measures the commit and its durable writes alone in the same run.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from ..checkpoint.offset_seq import OffsetSeq
from ..checkpoint.reader import InputFile
from ..delta.files import DeltaFile
from ..delta.target import DeltaSettings, DeltaTarget
from ..errors import ConfigError, DeltaTableError, ExactlyOnceError, WriterFencedError
from ..log.compactible_log import CompactibleLog
from ..log.compaction import all_valid_batches, is_compaction_batch
from ..log.compaction_preparation import CommitGate
from ..manifest.entry import ManifestEntry
from ..manifest.manifest_index import delete_stale_indexes, warm_up, write_index
from ..manifest.manifest_log import DIRECTORY as SPARK_MANIFEST_DIR, PRIVATE_DIRECTORY as PRIVATE_MANIFEST_DIR
from ..storage.base import Storage
from ..storage.io_threads import OwnedPool, submit_or_run
from ..table.attempt_key import AttemptKey, KeyedByAttempt
from ..table.commits_log import CommitRecord
from ..table.identity import TableIdentity, ensure_identity, note_root, read_identity
from ..table.layout import PROBE_DIR, staging_dir
from ..table.offsets_log import OffsetsRecord
from ..table.schema_log import SchemaRecord
from ..table.sources_log import SourceFileRecord
from ..table.table_logs import TableLogs
from .delta_step import CommitDelta
from .janitor import PREPARE_LANE, Janitor
from .lease import Lease, fenced_cause
from .recovery import INTENTS_SUBDIR, RecoveryReport, check_logs_consistent, discard_sequence, recover
from .schema_step import WriteSchema
from .sequence import CommitSequence, sync_files
from .step import CommitStep, Distribute, StepContext
from .steps import CleanupStaging, FileMove, MoveFiles, PublishManifest, WriteCommit, WriteOffsets, WriteSources
from .table_schema import TableSchema
from .wal import CommitSequenceStore

log = logging.getLogger("streaming_exactly_once.commit")


@dataclass(frozen=True)
class CommitterOptions:
    """How a table is committed. A setting the sinks also take has the sink option's name here
    (``SinkOptions``: ``retention_ms`` from ``retention``, ``writer_options``, ...)."""

    format: str = "parquet"
    partition_by: tuple[str, ...] = ()
    compact_interval: int = 10
    min_batches_to_retain: int = 100
    cleanup_delay_ms: int = 600_000
    retention_ms: int | None = None
    source_retention_ms: int | None = None
    lease_timeout_ms: int = 60_000
    heartbeat: bool = True
    move_threads: int = 8
    step_retries: int = 3
    description: str = ""
    writer_options: tuple[tuple[str, str], ...] = ()
    build_manifest_index: bool = True
    prepare_compactions: bool = True
    worker_moves_from: int = 5_000  # move lists this long run on the workers (when a sink gives them)
    #: ``format="delta"``: every batch is also one Delta commit (``commit.delta_step``); None: no Delta log
    delta: DeltaSettings | None = None
    #: False: the manifest is kept under ``_seo/manifest``, out of Spark's file-source readers' sight
    spark_manifest: bool = True
    #: what a batch may change in the table's schema (``table.schema_rules.EVOLUTION_MODES``)
    schema_evolution: str = "none"


@dataclass(frozen=True)
class StagedFile:
    """A data file of the batch: ``final`` relative to the table root; ``staged`` in rename mode."""

    final: str
    size: int
    mtime_ms: int
    staged: str | None = None
    #: rows in the file, where the writer knows them (``direct`` mode's tasks count them)
    rows: int | None = None


@dataclass
class BatchAttempt(KeyedByAttempt):
    """One attempt at committing a batch, from ``begin`` until its commit or abort."""

    #: which batch it claims, for which (query, Spark batch), in which epoch, token and mode
    key: AttemptKey
    staging_dir: str
    #: the offsets record the commit will write (the key's batch, source offsets)
    offsets: OffsetsRecord
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CommitResult:
    query_id: str
    spark_batch_id: int
    status: str  # "committed" | "duplicate" | "empty"
    batch_id: int | None = None
    record: CommitRecord | None = None
    timings: dict[str, float] = field(default_factory=dict)


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)


_warm_up_lock = threading.Lock()
_warm_up_thread: threading.Thread | None = None


def _warm_up_in_background() -> None:
    """The imports of the first index build (``manifest_index.warm_up``, ~0.45 s), once per
    process, while nothing waits: left to that build, they ran beside the next batches (#14).
    A daemon thread of their own, not the janitor's, whose drain a writer's close waits for:
    a writer that commits a batch and stops need not wait for imports it never uses. Only for
    a large table (``_history_is_large``): a small one's index takes milliseconds."""
    global _warm_up_thread
    with _warm_up_lock:
        if _warm_up_thread is None:
            _warm_up_thread = threading.Thread(target=warm_up, name="seo-warm-up", daemon=True)
            _warm_up_thread.start()


class TableCommitter:
    """Commits batches of data files to one table, exactly once per (query id, Spark batch id)."""

    #: which logs the root has (``table.table_logs``) and what its identity says it is
    KIND = "table"

    def __init__(self, storage: Storage, options: CommitterOptions = CommitterOptions()) -> None:
        self.storage = storage
        self.options = options
        self.logs = TableLogs.open(
            storage,
            interval=options.compact_interval,
            retention_ms=options.retention_ms,
            source_retention_ms=options.source_retention_ms,
            kind=self.KIND,
            manifest_dir=SPARK_MANIFEST_DIR if options.spark_manifest else PRIVATE_MANIFEST_DIR,
        )
        self.wal = CommitSequenceStore(storage)
        self.lease = Lease(storage, timeout_ms=options.lease_timeout_ms, description=options.description)
        self.identity: TableIdentity | None = None
        self.latest_batch_id = -1
        self._committed: dict[str, int] = {}
        self._input_paths: set[str] | None = None
        self._table_rows: int | None = 0
        self._ready = False
        self.last_recovery: RecoveryReport | None = None
        self.janitor = Janitor(storage)
        #: Closed while a batch commits: compaction copies take the disk between commits
        self.commit_gate = CommitGate()
        #: Logs whose retention is due, with the batch its window ends at (``_schedule_retention``).
        self._retention_lock = threading.Lock()
        self._retention_due: dict[int, tuple[CompactibleLog[Any], int]] = {}
        #: Completed batches whose WAL claim the janitor has not deleted yet, each with the
        #: records written without their sync (``_drop_claims``).
        self._claims_to_drop: list[ClaimToDrop] = []
        #: set by a sink: runs a function over chunks of a list on the cluster (see StepContext)
        self.distribute: Distribute | None = None
        #: Delta logs by table (None: this table), kept across batches (``StepContext.delta_targets``)
        self.delta_targets: dict[str | None, DeltaTarget] = {}
        #: this committer's threads for what a commit overlaps (``storage.io_threads``)
        self.pool = OwnedPool("commit", 4)
        #: the table's schema, loaded at ``open`` (``commit.table_schema``)
        self.schemas = TableSchema(
            storage, evolution=options.schema_evolution, file_format=options.format, delta=options.delta is not None
        )

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def epoch(self) -> int | None:
        return self.lease.epoch

    @property
    def ready(self) -> bool:
        return self._ready

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
        )

    def _commit_ctx(self) -> StepContext:
        """``_ctx`` for a fresh commit: with this committer's pool (a roll-forward has none)."""
        ctx = self._ctx()
        ctx.pool = self.pool.get()
        ctx.defer_sync = True
        return ctx

    def open(self) -> RecoveryReport:
        """Take the lease (if not held), recover, and load the state batches are checked against."""
        if self.lease.epoch is None:
            # The lease, the WAL and every log rely on exclusive creates: make sure this endpoint
            # really has them before trusting it with one (cached per endpoint and bucket).
            self.storage.check_exclusive_create(PROBE_DIR)
            self.lease.acquire()
            if self.options.heartbeat:
                self.lease.start_heartbeat()
        self.lease.check_fence("recover")
        try:
            self._check_interval()
            self._stop_preparations()  # the drain waits for them; the recovery discards them anyway
            self.janitor.drain()
            for log_ in self.logs.all_logs():
                log_.gaps()  # a stray file far beyond the latest batch is named before anything trusts "latest"
                log_.preparation.discard_all()
                log_.preparation.owner = self.preparation_owner
                log_.preparation.gate = self.commit_gate
            report = self._recover()
            self.last_recovery = report
            self.latest_batch_id = report.latest_batch_id
            # A table reached through another spelling of its root (a symlink, a move, s3a://)
            # gets entries under that root: record it so readers and gc know them all.
            self.identity = note_root(self.storage, self._ensure_identity())
            if self.identity.first_batch_id > 0 and self.logs.commits.latest_batch_id(refresh=True) is None:
                # Adopting a table written by Spark's own file sink: our logs start here.
                for log_ in (self.logs.require_offsets(), self.logs.commits, self.logs.require_sources()):
                    log_.write_empty_baseline(self.identity.first_batch_id - 1)
            check_logs_consistent(self.logs, self.latest_batch_id, self.identity.first_batch_id)
            self._check_delta()
            self._load_schema()
            latest_records = self.logs.commits.latest_per_query()
        except BaseException:
            # The table needs a person (the error says what to do): free it for `seo recover` at once.
            self.lease.release()
            raise
        self._committed = {q: r.spark_batch_id for q, r in latest_records.items()}
        newest = max(latest_records.values(), key=lambda r: r.batch_id, default=None)
        self._table_rows = newest.table_rows if newest is not None else 0
        self._input_paths = None
        self._load_state(newest)
        self._ready = True
        # The next compaction's copy starts now, not after the first batch: the first one after a
        # start is otherwise left to its own batch (50 MB at 250k live files), and its first check
        # of the previous file imports pyarrow's parquet module (~0.12 s).
        self._queue_preparation()
        if self._history_is_large():
            _warm_up_in_background()
        if not report.clean:
            log.warning("recovery of %s: %s", self.storage.root_uri, report)
        return report

    def _history_is_large(self) -> bool:
        """Whether the manifest's newest compact file is one the storage copies (at least
        ``copy_threshold`` bytes, ~4,000 entries): compactions then cost more than imports."""
        manifest = self.logs.manifest
        if manifest is None or self.latest_batch_id < 0:
            return False
        compact_id = all_valid_batches(self.latest_batch_id, manifest.interval)[0]  # the newest compact, if any
        if not is_compaction_batch(compact_id, manifest.interval):
            return False
        try:
            return self.storage.info(manifest.path(compact_id)).size >= manifest.copy_threshold
        except FileNotFoundError:
            return False

    # -- what differs between a table and a dataset group (``commit.group_committer``) ---------

    def _recover(self) -> RecoveryReport:
        return recover(self.storage, self.logs, self.wal, self._ctx(), retries=self.options.step_retries, fence=self.lease.check_fence)

    def _ensure_identity(self) -> TableIdentity:
        return ensure_identity(
            self.storage,
            compact_interval=self.logs.require_manifest().interval,
            format=self.options.format,
            partition_by=tuple(self.options.partition_by),
            first_batch_id=self.latest_batch_id + 1,
            writer_options=dict(self.options.writer_options),
            delta=self.options.delta is not None,
            spark_manifest=self.options.spark_manifest,
        )

    @property
    def delta(self) -> DeltaTarget | None:
        """This table's Delta log (``format="delta"``, after ``open``); None otherwise."""
        if self.identity is None or self.identity.delta_app_id is None or self.options.delta is None:
            return None
        target = self.delta_targets.get(None)
        if target is None or target.app_id != self.identity.delta_app_id:
            target = self.delta_targets[None] = DeltaTarget(self.storage, self.identity.delta_app_id, self.options.delta)
        return target

    def _check_delta(self) -> None:
        """After recovery the Delta log holds exactly the manifest's batches (every batch whose
        manifest entry is published had its Delta commit rolled forward)."""
        target = self.delta
        if target is None:
            return
        assert self.identity is not None
        if self.identity.first_batch_id > 0:
            raise ConfigError(
                f"Table {self.storage.root_uri} was first written by Spark's own file sink (batches before "
                f"{self.identity.first_batch_id} have no records of this library), so its Delta log would miss them. "
                "Write format='delta' to a new table.",
                table=self.storage.root_uri,
                key="format",
            )
        applied = target.applied_batch()
        applied = -1 if applied is None else applied
        if applied != self.latest_batch_id:
            raise DeltaTableError(
                f"The Delta log {target.log_uri} holds batches up to {applied} of table {self.storage.root_uri}, but its "
                f"manifest holds batches up to {self.latest_batch_id} and no commit is pending. Delta readers and "
                "manifest readers would see different data. Restore the Delta log (or the manifest) from a backup; "
                "`seo status` shows both.",
                path=target.log_uri,
                table=self.storage.root_uri,
            )

    def _load_schema(self) -> None:
        """The table schema batches are checked against (``commit.table_schema``); an existing
        Delta table without batches of ours starts from its Delta log's schema."""
        assert self.identity is not None
        target = self.delta if self.latest_batch_id < 0 else None
        self.schemas.load(
            self.latest_batch_id, commits=self.logs.commits, first_batch_id=self.identity.first_batch_id,
            partition_by=self.identity.partition_by, fence=self.lease.check_fence,
            delta_schema=target.schema_json() if target is not None else None, delta_log=target.log_uri if target is not None else None,
        )

    def _load_state(self, newest: CommitRecord | None) -> None:
        """Extra state from the newest commit record (a group's datasets); nothing for a table."""

    def _check_interval(self) -> None:
        """The compact interval is part of a table's on-disk layout (file names): refuse another
        one before anything reads the logs with it."""
        identity = read_identity(self.storage)
        if identity is not None and identity.compact_interval != self.options.compact_interval:
            raise ConfigError(
                f"Table {self.storage.root_uri} was created with compact_interval={identity.compact_interval}, "
                f"but this writer is configured with compact_interval={self.options.compact_interval}. The interval "
                "is fixed for the life of a table (its .compact file names depend on it): configure "
                f"compact_interval={identity.compact_interval}, or write to a new table.",
                key="compact_interval",
                table=self.storage.root_uri,
            )

    def invalidate(self) -> None:
        """After a failed batch: the next ``ensure_open`` recovers before anything else."""
        self._ready = False

    def ensure_open(self) -> None:
        if not self._ready or self.lease.epoch is None:  # the lease may have been given up
            self.open()

    def close(self) -> None:
        self._stop_preparations()  # the drain waits for them; their work files are discarded
        self.janitor.drain()
        if self.lease.epoch is not None and not self.lease.is_fenced():
            for log_ in self._growing_logs():
                log_.preparation.discard()  # no work file outlives a clean stop (red team #14 G6)
        else:
            for log_ in self._growing_logs():
                log_.preparation.abort_upload()  # by its own id: never the successor's
        self.lease.release()
        self.pool.close()
        self._ready = False

    # -- state -------------------------------------------------------------------------------

    def last_spark_batch(self, query_id: str) -> int | None:
        return self._committed.get(query_id)

    def is_committed(self, query_id: str, spark_batch_id: int) -> bool:
        last = self._committed.get(query_id)
        return last is not None and spark_batch_id <= last

    def knows_query(self, query_id: str) -> bool:
        return query_id in self._committed

    def committed_input_paths(self) -> set[str]:
        """Every input file the table has committed (loaded on first use, then kept current)."""
        if self._input_paths is None:
            self._input_paths = self.logs.require_sources().committed_paths()
        return self._input_paths

    # -- protocol ----------------------------------------------------------------------------

    def begin(
        self,
        query_id: str,
        spark_batch_id: int,
        *,
        mode: str,
        checkpoint: str | None = None,
        offsets: OffsetSeq | None = None,
    ) -> BatchAttempt:
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
            ),
        )
        attempt.timings["intent"] = _ms(t0)
        return attempt

    @contextlib.contextmanager
    def batch(
        self,
        query_id: str,
        spark_batch_id: int,
        *,
        mode: str,
        checkpoint: str | None = None,
        offsets: OffsetSeq | None = None,
    ) -> Iterator[BatchAttempt]:
        """One attempt at a batch, as a block::

            with committer.batch(query_id, spark_batch_id, mode="rename") as attempt:
                files = write_the_data_under(attempt.staging_dir)
                result = committer.commit(attempt, files, num_rows=n)

        ``begin`` on entry; if the block raises - staging failed, a check refused the batch,
        the commit failed before its WAL claim - the attempt is aborted (``abort``) and the error
        goes on. A claimed attempt is never aborted: it can only roll forward.
        """
        attempt = self.begin(query_id, spark_batch_id, mode=mode, checkpoint=checkpoint, offsets=offsets)
        try:
            yield attempt
        except BaseException as exc:
            self.abort(attempt)
            fenced = self.fenced_cause_of(exc)
            if fenced is not None:
                raise fenced from exc
            raise

    def fenced_cause_of(self, exc: BaseException) -> WriterFencedError | None:
        """The ``WriterFencedError`` behind a failed staging, if this writer was fenced meanwhile.

        Why: a writer frozen while it stages (a GC pause, a stopped VM) loses its lease; the
        successor's recovery aborts the abandoned attempt and removes its staging directory.
        When the frozen writer wakes up, its own write fails with whatever the storage or Spark
        says about a missing directory - the cause is the fencing, and the error says so."""
        if not isinstance(exc, Exception) or isinstance(exc, ExactlyOnceError):
            return None
        try:
            return fenced_cause(self.storage, self.lease.epoch, "stage")
        except Exception:  # never mask the real error
            return None

    def abort(self, attempt: BatchAttempt) -> None:
        """Best-effort removal of an attempt that will not commit (nothing of it is visible).

        Only the attempt's own staging directory (and, in direct mode, the files its intents
        name) goes: nothing outside it is the attempt's, whoever holds the table by now.
        """
        from .recovery import abort_attempt

        try:
            claim = self.wal.get(attempt.batch_id)
            if claim is not None and claim.attempt == attempt.attempt:
                return  # claimed: this batch may only roll forward (recovery does it)
            abort_attempt(self.storage, attempt.staging_dir)
        except Exception:  # recovery at the next start does the same; never mask the real error
            log.exception("could not clean up attempt %s of batch %d", attempt.attempt, attempt.batch_id)

    def commit(
        self,
        attempt: BatchAttempt,
        files: Sequence[StagedFile],
        *,
        input_files: Sequence[InputFile] = (),
        num_rows: int | None = None,
        num_skipped_rows: int = 0,
        watermarks: dict[str, dict[str, Any]] | None = None,
        schema: str | None = None,
    ) -> CommitResult:
        """Publish the attempt's files as manifest batch ``attempt.batch_id``, exactly once."""
        if num_rows == 0 or not files:
            self.abort(attempt)
            return CommitResult(attempt.query_id, attempt.spark_batch_id, "empty", timings=dict(attempt.timings))
        t_plan = time.perf_counter()
        m = attempt.batch_id
        new_schema = self._schema_record(attempt, schema)
        entries = [ManifestEntry.for_file(self.storage.uri(f.final), size=f.size, modification_time=f.mtime_ms) for f in files]
        delta_step = self._delta_step(attempt, files, schema, new_schema.schema if new_schema is not None else None)
        if delta_step is not None and m == 0:
            entries = self._adopted_entries() + entries
        steps: list[CommitStep] = []
        if attempt.mode == "rename":
            steps.append(MoveFiles(moves=[FileMove(f.staged or "", f.final, f.size) for f in files]))
        if new_schema is not None:  # before the visibility point: who sees the batch finds its schema
            steps.append(WriteSchema(record=new_schema))
        steps.append(PublishManifest(batch_id=m, entries=entries))
        if delta_step is not None:
            steps.append(delta_step)
        steps.append(offsets_step(attempt, m))
        steps.append(sources_step(m, input_files))
        now_ms = int(time.time() * 1000)
        record = self._record(
            attempt,
            m,
            files=files,
            num_rows=num_rows,
            now_ms=now_ms,
            step_ms=dict(attempt.timings),
            watermarks=watermarks or {},
            num_skipped_rows=num_skipped_rows,
            source_files=len(input_files),
            schema=schema,
            table_rows=None if self._table_rows is None or num_rows is None else self._table_rows + num_rows,
        )
        steps.append(WriteCommit(record=record))
        if attempt.mode == "direct":
            steps.append(CleanupStaging(path=f"{attempt.staging_dir}/{INTENTS_SUBDIR}"))
        seq = self._sequence(attempt, steps, now_ms)
        ctx = self._run_sequence(attempt, seq, t_plan)
        self.schemas.committed(new_schema, m)
        if self.options.build_manifest_index and is_compaction_batch(m, self.logs.require_manifest().interval):
            self.janitor.submit_latest("index", lambda: index_compact(self.logs, m))
        return self._committed_batch(attempt, record, input_files, ctx)

    def _schema_record(self, attempt: BatchAttempt, schema: str | None) -> SchemaRecord | None:
        """Check (before any claim) that the batch's files fit the table schema; the schema
        record the batch writes, if it creates or changes the schema (``commit.table_schema``)."""
        if schema is None:
            return None  # a caller that knows no schema (tests of the protocol alone)
        what = f"Batch {attempt.spark_batch_id} of query {attempt.query_id}"
        verdict = self.schemas.check_files(schema, self.options.partition_by, what=what)
        return self.schemas.record_for(verdict, attempt.batch_id, self.options.partition_by)

    def _delta_step(
        self, attempt: BatchAttempt, files: Sequence[StagedFile], schema: str | None, table_schema: str | None = None
    ) -> CommitDelta | None:
        """The batch's Delta commit, after checking (before any claim) that the table takes it.
        ``table_schema``: the table's schema after the batch, when the batch changes it."""
        target = self.delta
        if target is None:
            return None
        t0 = time.perf_counter()
        target.check_batch(schema, self.options.partition_by, table_schema=table_schema)
        attempt.timings["deltaCheck"] = _ms(t0)
        return CommitDelta(
            batch_id=attempt.batch_id,
            app_id=target.app_id,
            files=[DeltaFile(f.final, f.size, f.mtime_ms) for f in files],
            partition_by=tuple(self.options.partition_by),
            schema=schema,
            table_schema=table_schema,
            settings=target.settings,
            info={"queryId": attempt.query_id, "sparkBatchId": str(attempt.spark_batch_id)},
        )

    def _adopted_entries(self) -> list[ManifestEntry]:
        """Manifest batch 0 of a table adopted from an existing Delta table: its files too, so that
        ``_spark_metadata`` readers see the same rows as Delta readers (``spark_manifest`` only)."""
        target = self.delta
        if target is None or not self.options.spark_manifest:
            return []
        return [ManifestEntry.for_file(self.storage.uri(f.path), size=f.size, modification_time=f.mtime_ms) for f in target.live_files()]

    def _record(
        self, attempt: BatchAttempt, batch_id: int, *, files: Sequence[StagedFile], num_rows: int | None, now_ms: int, **extra: Any
    ) -> CommitRecord:
        """The commit record of ``files`` as batch ``batch_id`` of this attempt."""
        return CommitRecord.of(
            replace(attempt.key, batch_id=batch_id, epoch=self.lease.epoch or 0),
            num_files=len(files),
            num_rows=num_rows,
            num_bytes=sum(f.size for f in files),
            commit_time_ms=now_ms,
            **extra,
        )

    def _sequence(self, attempt: BatchAttempt, steps: list[CommitStep], now_ms: int) -> CommitSequence:
        return CommitSequence(
            key=replace(attempt.key, epoch=self.lease.epoch or 0),
            staging_dir=attempt.staging_dir,
            created_ms=now_ms,
            steps=steps,
        )

    def _run_sequence(self, attempt: BatchAttempt, seq: CommitSequence, t_plan: float) -> StepContext:
        """Claim the batch in the WAL, run every step, then have the janitor drop the claim."""
        ctx = self._commit_ctx()
        ctx.timings.update(attempt.timings)
        ctx.timings["plan"] = _ms(t_plan)
        self.lease.check_fence("publish")
        with self.commit_gate.committing():  # background copies wait (``CommitGate``)
            t_wal = time.perf_counter()
            ctx.staged_data_durable = self._claim_while_syncing_staged(seq, ctx)
            ctx.timings["wal"] = _ms(t_wal)
            self.lease.check_fence("publish")  # a claim made after a takeover stops here
            seq.run(ctx, fresh=True, retries=self.options.step_retries)
        # The claim is dropped off the batch's path (an unlink of a file just fsync'd waits on
        # the journal: ~0.14 ms of a 5 ms commit): every step is done and durable, so a claim
        # still there after a crash is rolled forward by recovery, each step verified done -
        # what a kill between the commit record and this delete always did. The WAL entry goes
        # first, the staging leftovers (.crc, _SUCCESS, empty dirs) after it: a staging directory
        # without its claim is an attempt recovery may abort, and this one's data has moved.
        # Registered before ``latest_batch_id`` moves on: retention drops it first (_run_retention).
        # The offsets and sources records were written without waiting for the disk; the claim
        # is what can rebuild them, so they are synced before it goes (``_drop_claims``).
        with self._retention_lock:
            self._claims_to_drop.append(ClaimToDrop(seq, ctx))
        self.janitor.submit(partial(self._drop_claim, attempt.staging_dir))
        self._queue_preparation()
        return ctx

    def _drop_claim(self, staging_dir: str) -> None:
        if self._drop_claims():  # this batch's claim among them; its leftovers only after it
            self.storage.delete_tree(staging_dir)

    def _drop_claims(self) -> bool:
        """Delete the WAL claims of every batch this writer completed so far; False if one could
        not be deleted (it stays registered, for the next pass).

        Why retention calls this first (red team of 05953ee): recovery takes a claim for batch M
        <= L as published only while M's manifest file (a group's: M's commit record) is there.
        Retention deletes that file once M is old enough, and its coalesced pass runs with the
        newest batch's window at the queue position of the oldest - ahead of claims dropped
        after it. A crash then left claims of published batches whose files were gone; recovery
        judged them never published and, in direct mode, deleted their data files."""
        with self._retention_lock:
            batches, self._claims_to_drop = self._claims_to_drop, []
        failed: list[ClaimToDrop] = []
        done = 0
        try:
            try:
                # a record whose sync failed is written again, never synced again: Linux marks
                # the pages of a failed fsync clean, so the next fsync can succeed with the bytes
                # never on disk (red team of ce20f30)
                for claim in batches:
                    if claim.sync_failed:
                        claim.seq.rewrite_deferred(claim.ctx)
                # one call for every other batch: their fsyncs overlap, and when batches outrun
                # this thread a pass syncs many records at the cost of a few
                sync_files([
                    pair for claim in batches if not (claim.durable or claim.sync_failed) for pair in claim.seq.written(claim.ctx, deferred=True)
                ])
                for claim in batches:
                    claim.durable, claim.sync_failed = True, False  # a claim whose delete fails is not synced again
            except Exception:
                log.exception(
                    "making the bookkeeping records of batches %s durable failed; their claims stay, and the records are "
                    "written again before the next retention pass",
                    [claim.seq.batch_id for claim in batches],
                )
                for claim in batches:
                    claim.sync_failed = not claim.durable
                failed, done = list(batches), len(batches)
            for claim in batches[done:]:
                try:
                    self.wal.delete_completed(claim.seq.batch_id)
                except Exception:
                    log.exception("deleting the WAL claim of completed batch %d failed; retried before the next retention pass", claim.seq.batch_id)
                    failed.append(claim)
                done += 1
        finally:
            # whatever was not deleted stays registered - a BaseException (a cancelled async
            # client, SystemExit) included: losing it would let retention outrun the claim
            left = failed + batches[done:]
            if left:
                with self._retention_lock:
                    self._claims_to_drop = left + self._claims_to_drop
        return not failed

    def _committed_batch(self, attempt: BatchAttempt, record: CommitRecord, input_files: Sequence[InputFile], ctx: StepContext) -> CommitResult:
        """Bring the in-memory state up to the batch just committed; apply retention."""
        m = record.batch_id
        self.latest_batch_id = m
        self._table_rows = record.table_rows
        self._committed[attempt.query_id] = attempt.spark_batch_id
        if self._input_paths is not None:
            self._input_paths.update(i.path for i in input_files)
        self._schedule_retention(m)
        if self.options.prepare_compactions:
            t_pace = time.perf_counter()
            self._keep_pace_with_preparations()
            ctx.timings["pace"] = _ms(t_pace)
        return CommitResult(attempt.query_id, attempt.spark_batch_id, "committed", m, record, dict(ctx.timings))

    def _claim_while_syncing_staged(self, seq: CommitSequence, ctx: StepContext) -> bool:
        """Claim the batch while the staged files are fsync'd (Spark's writers do not sync).

        Both only wait on the disk, so they overlap; the moves wait for both. True if the staged
        bytes were synced here - the move step then makes only the new names durable. Syncing
        before the moves also lets a roll-forward after a power cut find the staged files it
        must move. A move list the workers run (``worker_moves_from``) is synced by them."""
        staged = [m.src for step in seq.steps if isinstance(step, MoveFiles) for m in step.moves]
        if not staged or (ctx.distribute is not None and len(staged) >= ctx.distribute_from):
            self._claim(seq)
            return False
        assert ctx.pool is not None
        syncing = submit_or_run(ctx.pool, self.storage.sync, staged)
        try:
            self._claim(seq)
        finally:
            failed = syncing.exception()  # never leave it running; a failed claim's error goes on
        if isinstance(failed, FileNotFoundError):
            # A successor aborted this attempt and deleted its staged files: the fence check
            # next stops this writer.
            log.debug("staged files of batch %d are gone (%s)", seq.batch_id, failed)
            return False
        if isinstance(failed, OSError):
            # The disk failed a sync: the move step syncs the files again (with retries) and
            # fails the batch, to be rolled forward, if the disk still does.
            log.warning("syncing the staged files of batch %d failed (%s); the move step syncs them again", seq.batch_id, failed)
            return False
        if failed is not None:
            raise failed
        return True

    def _claim(self, seq: CommitSequence) -> None:
        try:
            self.wal.put(seq)
            return
        except FileExistsError:
            pass
        existing = self.wal.get(seq.batch_id)
        if existing is not None and existing.epoch < seq.epoch:
            # Claimed by a writer we had already fenced when it claimed (our recovery listing did
            # not see it): it fails its own fence check and never runs a step. Remove it.
            log.warning("removing WAL claim on batch %d by fenced epoch %d", seq.batch_id, existing.epoch)
            discard_sequence(self.storage, existing)
            self.wal.delete(seq.batch_id, attempt=existing.attempt)
            self.wal.put(seq)
            return
        raise WriterFencedError(
            f"Manifest batch {seq.batch_id} of {self.storage.root_uri} was claimed by writer epoch "
            f"{existing.epoch if existing else '?'} while this writer (epoch {seq.epoch}) held the lease. "
            "Another writer is active; this one stops without publishing.",
            batch_id=seq.batch_id,
        )

    def _queue_preparation(self) -> None:
        """Queue one pass of ``_prepare_compactions`` on the janitor's own lane (passes queued
        while one runs coalesce into one): after the open and after each commit."""
        if self.options.prepare_compactions:
            self.janitor.submit_latest("prepare", self._prepare_compactions, lane=PREPARE_LANE)

    def _prepare_compactions(self) -> None:
        """Keep the next compact files of the growing logs built ahead (``log.compaction_preparation``)."""
        if self.lease.is_fenced():
            return
        self.logs.require_manifest().preparation.advance()
        self.logs.require_sources().preparation.advance()

    def _keep_pace_with_preparations(self) -> None:
        """Once a batch is committed, wait until the background copies that prepare the next
        compactions are as far as the batches (``CompactionPreparation.keep_pace``): back to
        back, the copy's time is spread over the batches before a compaction, not left to it."""
        for log_ in self._growing_logs():
            log_.preparation.keep_pace()

    def _stop_preparations(self) -> None:
        """Stop the background compaction copies (``CompactionPreparation.stop``): the writer
        closes or reopens, waits for its background work, and discards their work files."""
        for log_ in self._growing_logs():
            log_.preparation.stop()

    def _growing_logs(self) -> list[CompactibleLog[Any]]:
        return list(self.logs.all_logs())

    def _schedule_retention(self, batch_id: int) -> None:
        """Delete the log files no reader needs any more, on the janitor's thread (#14).

        Nothing waits for it: the batch is durable and published without it, and a file that a
        crash leaves undeleted is deleted by the next pass. Inside the commit it cost 8 ms per
        compaction batch at 100 live files and 35-120 ms at 250k, where deleting the old
        compact file (tens of MB) holds the filesystem's journal. What to delete is decided here,
        from this batch's state, and added to what is due: passes coalesce when batches outrun
        the thread, and the pass that runs takes every log due (a dataset group's batch touches
        some member tables only). A writer fenced meanwhile deletes nothing."""
        with self._retention_lock:
            for log_, current in self._retention_targets(batch_id):
                due = self._retention_due.get(id(log_))
                if due is None or due[1] < current:
                    self._retention_due[id(log_)] = (log_, current)
        self.janitor.submit_latest("retention", self._run_retention)

    def _run_retention(self) -> None:
        with self._retention_lock:
            due, self._retention_due = list(self._retention_due.values()), {}
        if self.lease.is_fenced():
            return
        if not self._drop_claims():
            # a claim whose batch's files this pass could delete is still there: keep them
            with self._retention_lock:
                for log_, current in due:
                    kept = self._retention_due.get(id(log_))
                    if kept is None or kept[1] < current:
                        self._retention_due[id(log_)] = (log_, current)
            return
        for log_, current in due:
            log_.delete_expired(
                current,
                min_batches_to_retain=self.options.min_batches_to_retain,
                cleanup_delay_ms=self.options.cleanup_delay_ms,
            )

    def _retention_targets(self, batch_id: int) -> list[tuple[CompactibleLog[Any], int]]:
        """Each log that retention keeps short, with the batch id its window ends at."""
        return [(log_, batch_id) for log_ in self.logs.all_logs()]


@dataclass
class ClaimToDrop:
    """A completed batch whose WAL claim the janitor has yet to delete (``_drop_claims``), with
    the context its steps ran in: the records the commit wrote without their sync are found,
    synced and, after a failed sync, written again from it (``CommitSequence.written``,
    ``rewrite_deferred``) on the janitor's thread, not on the batch's."""

    seq: CommitSequence
    ctx: StepContext
    #: its deferred records were made durable (only the claim's delete is left)
    durable: bool = False
    #: a sync of them failed: they are written again, never synced again
    sync_failed: bool = False


def index_compact(logs: TableLogs, compact_id: int) -> None:
    """Index compact file ``compact_id`` of a table's manifest, unless retention removed it
    meanwhile (batches can outrun the background thread); then drop older indexes."""
    manifest = logs.require_manifest()
    try:
        write_index(logs.storage, compact_id, manifest)
    except FileNotFoundError:
        log.debug("compact %d of %s is gone before it was indexed; a later one will be", compact_id, logs.storage.root_uri)
        return
    delete_stale_indexes(logs.storage, manifest)


def offsets_step(attempt: BatchAttempt, batch_id: int) -> WriteOffsets:
    return WriteOffsets(record=replace(attempt.offsets, batch_id=batch_id))


def sources_step(batch_id: int, input_files: Sequence[InputFile]) -> WriteSources:
    return WriteSources(
        batch_id=batch_id,
        files=[SourceFileRecord(batch_id=batch_id, source=i.source, path=i.path, timestamp=i.timestamp) for i in input_files],
    )
