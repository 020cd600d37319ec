"""What every sink of this library does around a batch, whatever it writes.

``BatchSink`` is the ``foreachBatch`` callable's skeleton: one batch at a time (a lock), the
query's identity (query id + checkpoint), the idempotence check, the input-file records and the
abort of a failed attempt; the table's lease follows the query (``sink.query_lease``).
Subclasses stage and commit: ``ExactlyOnceSink`` one table, ``DatasetSink`` a group of tables.

**Configuration vs. process state.** A sink object is configuration (table, options,
checkpoint) plus state that only makes sense in one process: the storage client, the committer
with the table's lease and its heartbeat thread, the query it is writing for. The state is
built on first use and never pickled, so the sink can be shipped to where ``foreachBatch`` runs
- under Spark Connect a Python worker of the server - and it builds its own state there.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql.streaming.query import StreamingQuery

from ..checkpoint.offset_seq import OffsetSeq
from ..checkpoint.reader import SparkCheckpoint
from ..commit.protocol.attempt import BatchAttempt, CommitResult
from ..config import parse_duration_ms, reject_unknown, spark_trigger
from ..errors import ConfigError, ExactlyOnceError, SinkInUseError
from ..storage import open_storage
from ..storage.base import Storage
from ..storage.local_errors import file_root_error
from ..table.source_offsets import kafka_json, merged_ends
from .input_filter import BatchFilters, CommittedInputFilter, check_replay, file_rows_keep_names, warn_reread_inputs
from .live_sinks import LiveSinks
from .offset_guard import OffsetColumns, guard_batch
from .options import Duration, SinkOptions, StagingMode
from .progress import batch_committed_event, observe_stream
from .query_history import committed_under_another_id, knows_query, take_over, written_by_spark_sink
from .query_identity import QueryIdentity, is_connect, local_query_id, local_run_marker, resolve_identity
from .query_lease import CommitterT, QueryLease
from .record_probe import RecordProbe
from .surfacing import note_refusal, surfacing
from .worker_moves import distribute_moves

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11


log = logging.getLogger("streaming_exactly_once.sink")


def wrap_storage(storage: Storage, spec: str) -> Storage:
    """``storage`` passed through the ``storage_wrapper`` option's ``module:callable``."""
    module_name, _, name = spec.partition(":")
    try:
        wrapper = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"storage_wrapper {spec!r} cannot be imported here: {exc}", key="storage_wrapper") from exc
    wrapped = wrapper(storage)
    if not isinstance(wrapped, Storage):
        raise ConfigError(f"storage_wrapper {spec!r} returned {type(wrapped).__name__}, not a Storage", key="storage_wrapper")
    return wrapped


def _spark_app_id(df: DataFrame) -> str | None:
    """The Spark application running the batch: with the query id it tells a new run of our
    query from another writer (``commit.protocol.lease``). One config read, at a query's first batch."""
    try:
        return df.sparkSession.conf.get("spark.app.id", None)
    except Exception:  # noqa: BLE001 - without it the lease just waits as before
        return None


class BatchSink(QueryLease[CommitterT]):
    """Skeleton of a ``foreachBatch`` sink; see the module docstring."""

    #: Attributes that belong to one process: rebuilt after unpickling, never shipped.
    _PROCESS_STATE: tuple[str, ...] = (
        "_lock",
        "_storage",
        "_committer",
        "_query",
        "_active_query",
        "_active_run",
        "_session",
        "_identities",
        "_run_identity",
        "_checkpoints",
        "_batch_ends",
        "_observer",
        "last_error",
    )

    def __init__(self, table: str, options: SinkOptions) -> None:
        """``options``: the table options, built and validated by the subclass from its
        keyword arguments (``SinkOptions.build``)."""
        self.options = options
        self.table = table
        self._checkpoint = self.options.checkpoint_location
        self.counters = {"committed": 0, "duplicates": 0, "empty": 0, "failed": 0, "skipped_rows": 0}
        self.last_result: CommitResult | None = None
        self._setup_process_state()
        storage = open_storage(table, self.options.storage_options)  # a bad URI or scheme fails here, not in a batch
        if storage.root_is_file():
            raise file_root_error(storage)

    def _setup_process_state(self) -> None:
        self._lock = threading.Lock()
        self._storage: Storage | None = None
        self._committer: CommitterT | None = None
        self._query: StreamingQuery | None = None  # the StreamingQuery ``start`` started (classic and Connect client)
        self._active_query: str | None = None  # id of the query whose batches this process commits
        self._active_run: str | None = None  # and the id of its run (classic Spark): a restart gets a new one
        self._session: Any = None  # classic: the session running that query
        self._identities: dict[str, QueryIdentity] = {}
        self._run_identity: tuple[str, QueryIdentity] | None = None  # the adopted run's, by its marker
        #: Spark checkpoints read by batches, by location, kept across batches as Spark keeps its
        #: own logs: a file-source log's compact interval is derived once, not by listing the log
        #: (which grows with every batch until Spark's cleanup delay passes) for each batch.
        self._checkpoints: dict[str, tuple[str, SparkCheckpoint]] = {}  # location -> (query, reader)
        #: per query: its last batch seen here and that batch's end offsets (the next one's start)
        self._batch_ends: dict[str, tuple[int, dict[str, int]]] = {}
        #: the library's error of the last batch this sink refused in this process (``sink.surfacing``)
        self.last_error: ExactlyOnceError | None = None
        self._setup_observer()
        LIVE_SINKS.add(self)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in self._PROCESS_STATE}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup_process_state()

    # -- process state, built on first use ------------------------------------------------------

    @property
    def storage(self) -> Storage:
        if self._storage is None:
            storage = open_storage(self.table, self.options.storage_options)
            if self.options.storage_wrapper:
                storage = wrap_storage(storage, self.options.storage_wrapper)
            self._storage = storage
        return self._storage

    @property
    def committer(self) -> CommitterT:
        if self._committer is None:
            self._committer = self._make_committer()
        return self._committer

    def _make_committer(self) -> CommitterT:
        raise NotImplementedError

    @classmethod
    def from_config(
        cls,
        section: Mapping[str, Any],
        *,
        storage_options: Mapping[str, Any] | None = None,
        on_commit: Callable[[dict[str, Any]], None] | None = None,
    ) -> Self:
        """A sink from a ``[sink]`` config section (see the packaged config ``local``); ``checkpoint`` is kept
        as ``sink.checkpoint_location`` for ``start``. The other keys are the sink's keyword
        arguments (``options`` is the deprecated name of ``writer_options``)."""
        values = dict(section)
        table = values.pop("table", None)
        if not table:
            raise ConfigError('[sink] needs table = "<path or URI>"', key="sink.table")
        checkpoint = values.pop("checkpoint", None)
        values.pop("metrics_path", None)
        valid = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "table", "root")]
        reject_unknown(values, valid, where=f"the [sink] section of {cls.__name__}")
        values.update(storage_options=dict(storage_options or {}), on_commit=on_commit)
        sink = cls(table, **values)  # a subclass's constructor: its keyword arguments
        sink._checkpoint = checkpoint
        return sink

    @property
    def checkpoint_location(self) -> str | None:
        return self._checkpoint

    # -- running a query ---------------------------------------------------------------------

    def start(
        self,
        stream_df: DataFrame,
        *,
        checkpoint_location: str,
        trigger: Mapping[str, Any] | Duration | None = None,
        query_name: str | None = None,
    ) -> StreamingQuery:
        """Start ``stream_df`` into this table; returns the ``StreamingQuery``.

        Classic Spark: the lease is taken *before* the query starts, so a second writer of the
        table fails here with ``ConcurrentWriterError`` and its query never runs. Under Spark
        Connect the sink runs in a worker of the server and takes the lease there, at the first
        batch. ``trigger`` takes the keyword arguments of ``DataStreamWriter.trigger`` (e.g.
        ``{"availableNow": True}``), with an interval in any duration spelling of the options
        (``{"processingTime": "10s"}``), or a bare interval (``"10s"``: processing time). A
        batch the library refuses surfaces as its own error from the query's
        ``awaitTermination()`` and ``exception()`` (``sink.surfacing``).
        """
        if self._query is not None and self._query.isActive:
            raise SinkInUseError(
                f"This sink already writes {self.table} for the running query {self._query.id}. One sink "
                "object serves one query at a time: stop that query first, or build another sink.",
                table=self.table,
            )
        spark_trigger_kwargs = spark_trigger(trigger)  # a bad interval fails before anything is touched
        self._checkpoint = checkpoint_location
        if spark_trigger_kwargs.get("realTime"):
            raise ConfigError(
                "Spark's real-time mode (trigger realTime=...) cannot call foreachBatch - it hands the sink records, "
                "not batches, and records a batch's offsets only after its records went out - so no sink of this "
                "library can run in it. Use a micro-batch trigger (processingTime, availableNow).",
                key="trigger",
            )
        remote = is_connect(stream_df)
        self._check_start(stream_df)  # columns first: nothing is touched for a misspelt one
        if remote or self._runs_on_workers():
            from .worker_python import check_worker_python

            needed_for = "the sink under Spark Connect" if remote else f"{type(self).__name__} ({self._runs_on_workers()})"
            check_worker_python(stream_df.sparkSession, connect=remote, needed_for=needed_for)
        if not remote:
            self._take_table()
        self._check_start_schema(stream_df, holds_table=not remote)
        if self.options.progress_metrics and self.options.watermark_columns:
            # only where it adds what Spark's progress lacks: min/max of the watermark columns
            # (an observation in the plan costs about 3 % of a batch's write)
            stream_df = observe_stream(stream_df, tuple(self.options.watermark_columns))
        writer = stream_df.writeStream.foreachBatch(self).option("checkpointLocation", checkpoint_location)
        if spark_trigger_kwargs:
            writer = writer.trigger(**spark_trigger_kwargs)
        if query_name:
            writer = writer.queryName(query_name)
        query = surfacing(writer.start(), self)
        self._query = query
        if not remote:  # its batches come as the query_id given, if one was
            self._adopt_query(self.options.query_id or str(query.id), stream_df.sparkSession, run_id=str(query.runId))
        return query

    def _runs_on_workers(self) -> str | None:
        """What of this sink runs in Spark's Python workers in classic Spark, or None (a subclass
        that writes with ``mapInArrow`` says so)."""
        return None

    def open(self) -> None:
        """Take the table's lease and recover it now (``start`` does this too, in classic Spark).

        Calling it before building the SparkSession makes a second writer fail within a second,
        instead of after Spark's start-up.
        """
        self._take_table()

    def stop(self, timeout: Duration = "2m", *, timeout_s: float | None = None) -> None:
        """Stop the query started by ``start``; an in-flight commit is finished first, waiting for
        it up to ``timeout`` (a duration like the options': ``"2m"``, ``"30 seconds"``, a
        ``timedelta`` or seconds). ``timeout_s`` is its deprecated old name."""
        if timeout_s is not None:
            warnings.warn(
                "sink.stop(timeout_s=...) is now sink.stop(timeout=...), a duration like every option ('2m', '30s' "
                "or seconds); timeout_s will be removed",
                DeprecationWarning,
                stacklevel=2,
            )
            timeout = timeout_s
        wait_s = parse_duration_ms(timeout, key="timeout") / 1000
        if self._query is not None:
            self._query.stop()
        self._release(wait_s)
        if self._observer is not None:
            self._observer.close()  # the query's last lineage events are sent

    def release_lease_now(self) -> None:
        """Mark this sink's lease released at once (SIGTERM: the batch it interrupted never ends)."""
        committer = self._committer
        if committer is not None:
            committer.lease.release()

    def close(self) -> None:
        """Release the table's lease (the next writer need not wait for it to expire)."""
        self._release(120.0)
        if self._observer is not None:
            self._observer.close()

    def _other_sinks(self) -> list[QueryLease[Any]]:
        return [other for other in LIVE_SINKS if other is not self]

    # -- foreachBatch ------------------------------------------------------------------------

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self._lock:
            observer = self._observer if self._observer is not None or not self._observing else self._open_observer()
            if observer is not None:
                observer.batch_started(self.counters.get("quarantined_rows", 0))
            try:
                result = self._process(df, batch_id)
            except BaseException as exc:
                self.counters["failed"] += 1
                if isinstance(exc, ExactlyOnceError):
                    self.last_error = exc
                    note_refusal(lambda: self.storage, exc, query_id=self._active_query, batch_id=batch_id)
                if observer is not None:
                    observer.batch_failed(self._active_query, batch_id, exc, lease=self._committer.lease if self._committer else None)
                if self._committer is not None:
                    self._committer.invalidate()
                raise
            key = "duplicates" if result.status == "duplicate" else result.status
            self.counters[key] += 1
            self.last_result = result
            if observer is not None:
                observer.batch_done(result, rejected_rows_so_far=self.counters.get("quarantined_rows", 0), lease=self.committer.lease)

    def _same_run(self, run: str | None) -> bool:
        """Whether the batch's run marker (``local_run_marker``) is the run this sink adopted:
        Spark names a batch's job group after its run's id, which is of one query (a marker of
        the user's own job group never equals a run id)."""
        return run is not None and run == self._active_run

    def _identity(self, df: DataFrame, run: str | None) -> QueryIdentity:
        """The calling query's identity, cached per given id, Spark's own id and checkpoint."""
        if self._run_identity is not None and self._same_run(run) and self._run_identity[0] == run:
            return self._run_identity[1]  # the adopted run's query: its id need not be asked again
        spark_id = local_query_id(df)
        key = f"{self.options.query_id or ''}|{spark_id or ''}|{self._checkpoint}"
        cached = self._identities.get(key)
        if cached is not None:
            self._run_identity = (run, cached) if run is not None else None
            return cached
        identity = resolve_identity(df, query_id=self.options.query_id, checkpoint=self._checkpoint, checkpoint_query_id=self._checkpoint_query_id)
        if identity.checkpoint is not None:
            ckpt_id = self._checkpoint_query_id(identity.checkpoint)
            running = spark_id or (identity.query_id if self.options.query_id is None else None)
            if running is not None and ckpt_id != running:
                raise ConfigError(
                    f"checkpoint_location {identity.checkpoint} belongs to query {ckpt_id}, but this batch comes "
                    f"from query {running}. Pass the checkpoint location of the query that writes "
                    "the table (or leave it out).",
                    key="checkpoint_location",
                )
        else:
            log.warning(
                "checkpoint of query %s unknown: source offsets and input files are not recorded; use sink.start(...) or pass checkpoint_location=",
                identity.query_id,
            )
        self._identities[key] = identity
        self._run_identity = (run, identity) if run is not None else None
        return identity

    def _spark_checkpoint(self, location: str, query_id: str) -> tuple[SparkCheckpoint, str | None]:
        """The reader of query ``query_id``'s checkpoint (a new one for a new query at the location),
        and with a given query id the checkpoint's own id (read per batch: it may be recreated)."""
        own = self._checkpoint_query_id(location) if self.options.query_id is not None else None
        key = query_id if own is None else f"{query_id} {own}"
        held = self._checkpoints.get(location)
        if held is None or held[0] != key:  # an earlier query's reader: its batches are over
            held = self._checkpoints[location] = (key, SparkCheckpoint(open_storage(location)))
        return held[1], own

    def _checkpoint_query_id(self, location: str) -> str:
        return SparkCheckpoint(open_storage(location)).query_id()

    def _adopt_batch_query(self, identity: QueryIdentity, df: DataFrame, run: str | None) -> None:
        if self._active_query == identity.query_id and (is_connect(df) or run == self._active_run):
            # the same run as the last batch: Spark names a batch's job group after its run (a
            # user's own job group only costs the look-up below at every batch); under Connect
            # no run id is known
            return
        session, run_id = None, None
        if self.options.query_id is None:  # Spark's own id (from the checkpoint): one run at a time
            lease = self.committer.lease
            lease.query_id = identity.query_id
            lease.spark_app = _spark_app_id(df)
        if is_connect(df):
            from .query_watch import release_on_sigterm

            release_on_sigterm(LIVE_SINKS.release_leases_now)
            # Spark Connect ends an ended query's worker asynchronously (a listener on the server's bus),
            # long after the next query's first batch on a loaded machine: the lease waits that long for it
            self.committer.lease.handover_wait_s = self.options.connect_handover_wait_ms / 1000
        else:
            from .query_watch import check_progress_tracking, session_running

            check_progress_tracking(df)
            # the run is watched under Spark's own id, also when the sink was given another one
            spark_id = identity.query_id if self.options.query_id is None else local_query_id(df)
            session = session_running(spark_id) if spark_id else None
            query = session.streams.get(spark_id) if session is not None else None
            run_id = str(query.runId) if query is not None else None
        self._adopt_query(identity.query_id, session, run_id=run_id)
        if not self._holds_table():  # under _lock (a batch)
            self._take_from_other_sinks()
            self.committer.ensure_open()

    def _check_columns(self, df: DataFrame) -> None:
        names = set(df.columns)
        missing = [c for c in (*self.options.partition_by, *self.options.watermark_columns) if c not in names]
        if missing:
            raise ConfigError(
                f"column(s) {missing} given in partition_by/watermark_columns are not in the batch; its columns are {sorted(names)}",
                key="partition_by",
            )

    # -- the table's schema (``sink.schema_fit``, ``commit.table_schema``) --------------------

    def _check_start(self, stream_df: DataFrame) -> None:
        """At ``start``: the columns the options name are in the stream (``ConfigError``)."""
        self._check_columns(stream_df)

    def _check_start_schema(self, stream_df: DataFrame, *, holds_table: bool) -> None:
        """At ``start``: a stream whose schema the table would refuse fails now, before its query
        runs (``SchemaMismatchError``); ``holds_table``: the table's lease is this process's."""
        raise NotImplementedError

    def _fit_schema(self, df: DataFrame, what: str) -> Callable[[DataFrame], DataFrame]:
        """The batch against the table's schema, before anything of it is written
        (``SchemaMismatchError``); the projection that gives it the table's columns and types."""
        raise NotImplementedError

    def _process(self, df: DataFrame, batch_id: int) -> CommitResult:
        t_prepare = time.perf_counter()
        run = local_run_marker(df)  # one look-up a batch: it also tells the query (``_identity``)
        identity = self._identity(df, run)
        self._adopt_batch_query(identity, df, run)
        distribute_moves(self.committer, self.storage, df)
        qid = identity.query_id
        self.committer.ensure_open()
        checkpoint, spark_id = self._spark_checkpoint(identity.checkpoint, qid) if identity.checkpoint else (None, None)
        if checkpoint is not None:
            checkpoint.begin_batch(run if self._same_run(run) else None)
        known = knows_query(self.committer, qid, spark_id, identity.checkpoint)
        if known and self.committer.is_committed(qid, batch_id):
            if checkpoint is not None and identity.checkpoint:
                check_replay(self.committer, checkpoint, identity.checkpoint, query_id=qid, batch_id=batch_id)
            log.info("skipping batch %d of query %s: already committed", batch_id, qid)
            return CommitResult(qid, batch_id, "duplicate")
        renamed = committed_under_another_id(self.committer, qid, spark_id, batch_id)
        if renamed is not None:
            log.info("skipping batch %d of query %s: already committed as query %s (the same checkpoint)", batch_id, qid, renamed)
            return CommitResult(qid, batch_id, "duplicate")
        self._check_columns(df)
        fit = self._fit_schema(df, f"Batch {batch_id} of query {qid}")
        offsets = checkpoint.offsets(batch_id) if checkpoint else None
        inputs = checkpoint.input_files(batch_id) if checkpoint else None
        if checkpoint is not None and inputs is None:
            log.warning("input files of batch %d of query %s are not in its checkpoint any more", batch_id, qid)
        if not known and written_by_spark_sink(self.committer, qid, batch_id, inputs or []):
            return CommitResult(qid, batch_id, "duplicate")
        warn_reread_inputs(inputs or [], batch_id, qid)
        if self._observer is not None:
            self._observer.batch_sources(identity.checkpoint, offsets.offsets if offsets is not None else (), inputs)
        taken_over = [] if known else take_over(self.committer, qid, batch_id, checkpoint)
        guard = guard_batch(  # before anything is staged
            df,
            query_id=qid,
            batch_id=batch_id,
            checkpoint=checkpoint,
            offsets=offsets,
            batch_ends=self._batch_ends,
            writer=self.committer,
            columns=self.options.offset_columns,
            allow_gaps=self.options.allow_offset_gaps,
            known_query=known,
            probe=self._record_probe(fit),
        )
        self.committer.adopt_existing(lambda: fit(df).schema.json())  # before anything of the batch is staged
        with self.committer.batch(
            qid,
            batch_id,
            mode=self.staging_mode,
            checkpoint=identity.checkpoint,
            offsets=offsets,
            spark_query_id=spark_id,
            offset_resets=guard.resets,
        ) as attempt:
            self.storage.makedirs(attempt.staging_dir)  # the attempt's staging, before the writer fills it
            # the driver's work before Spark's write (identity, lease, checkpoint reads), for ``stepMs``
            attempt.timings["prepare"] = round((time.perf_counter() - t_prepare) * 1000, 3)
            committed = self.committer.committed_input_paths() if inputs or taken_over else set()
            attributed = OffsetColumns(*self.options.offset_columns)
            files = CommittedInputFilter(
                guard.df,
                inputs or [],
                committed,
                batch_id=batch_id,
                query_id=qid,
                attributed=attributed.attributed() if not attributed.missing(df) else None,
                keeps_names=lambda: file_rows_keep_names(df),
            )
            # the table's first batch of a query records it, rows or not: from then on the query is
            # known (its gaps are its own), its offsets raise the marks, its earlier inputs count
            must_commit = not known and bool(taken_over or (offsets is not None and merged_ends(offsets.offsets)))
            batch_inputs = BatchFilters(files, guard, [f for f in taken_over if f.path not in committed], must_commit)
            attempt.ledger = guard.ledger_inputs(self.options.offset_columns)
            result = self._stage_and_commit(fit(batch_inputs.df), attempt, batch_inputs, offsets)
        self.counters["skipped_rows"] += batch_inputs.skipped_rows()
        if result.status == "committed":
            self._emit(result)
        return result

    def _record_probe(self, fit: Callable[[DataFrame], DataFrame]) -> RecordProbe | None:
        """How to compare the batch's records with the table's (``sink.record_probe``); None:
        this sink cannot, and offsets alone decide."""
        return None

    def starting_offsets(self, topics: Iterable[str] | None = None) -> str | None:
        """Kafka ``startingOffsets`` JSON where the table's records end, per partition (of
        ``topics``, if given): start a query whose checkpoint was lost from exactly there.
        None if the table holds no records of a partitioned source.

        The table is opened (recovered) to read them; a sink that did not hold it before lets it
        go again at once, so a sink built only to ask this never keeps the next writer waiting
        for its lease to expire."""
        held = self._holds_table()
        self.committer.ensure_open()
        try:
            return kafka_json(self.committer.offset_marks(), topics)
        finally:
            if not held:
                self.committer.close()

    # -- what a subclass writes --------------------------------------------------------------

    staging_mode: StagingMode

    def _stage_and_commit(self, df: DataFrame, attempt: BatchAttempt, inputs: BatchFilters, offsets: OffsetSeq | None) -> CommitResult:
        """Write ``df`` (the batch without rows of committed input files) under the attempt's
        staging, call ``inputs.skipped_rows()`` once it is written, and commit."""
        raise NotImplementedError

    def _emit(self, result: CommitResult) -> None:
        """One structured event per committed batch, to the log and to ``on_commit``."""
        event = batch_committed_event(result, self.storage.root_uri, self._event_details(result))
        if self.options.on_commit is not None:
            self.options.on_commit(event)

    def _event_details(self, result: CommitResult) -> dict[str, Any]:
        """What a subclass adds to the commit event."""
        return {}


#: the sinks of this process (``live_sinks``): their leases are freed when it ends
LIVE_SINKS: LiveSinks[BatchSink[Any]] = LiveSinks()
