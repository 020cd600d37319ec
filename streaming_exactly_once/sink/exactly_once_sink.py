"""``ExactlyOnceSink``: the ``foreachBatch`` callable that commits each micro-batch exactly once.

::

    sink = ExactlyOnceSink("file:///data/events", format="parquet", partition_by=["day"])
    query = sink.start(stream_df, checkpoint_location="file:///chk/events")
    # or: stream_df.writeStream.foreachBatch(sink).option("checkpointLocation", ...).start()

Per batch (details in ``commit.committer``)::

    (query id, batch id) committed? --yes--> skip (Spark replayed it)
          | no
    schema fits the table's? --no--> SchemaMismatchError, nothing written (sink.schema_fit)
          | yes (cast/filled to it)
    intent _seo/offsets/M --> drop rows of already-committed input files --> stage the data
          (rename: Spark writer under _seo/staging; direct: executors write final names)
    --> WAL _seo/wal/M (create-if-absent) --> [move files] --> [_seo/schema/M: first or evolving batch]
    --> _spark_metadata/M  <- visible here
    --> _seo/sources/M --> _seo/commits/M --> clean staging --> delete WAL

A crash anywhere rolls forward (after the WAL) or back (before it) on restart, never both.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import DataFrame

from ..checkpoint.offset_seq import OffsetSeq
from ..commit.committer import BatchAttempt, CommitResult, TableCommitter
from ..errors import ConfigError
from .batch_metrics import BatchObservation
from .batch_sink import BatchSink
from .direct_writer import DirectWriter
from .input_filter import CommittedInputFilter
from .options import DIRECT_FORMATS, Duration, OnCommit, SinkOptions, StagingMode, default_staging_mode
from .rename_writer import RenameWriter


class ExactlyOnceSink(BatchSink[TableCommitter]):
    """Exactly-once file output for a streaming query; see the module docstring.

    Every option is keyword-only; durations take ``"500ms"``, ``"30s"``, ``"10m"``, ``"2h"``,
    ``"1d"`` or seconds as a number. A misspelt option is a ``TypeError``, a bad value a
    ``ConfigError`` naming the option.

    Args:
        table: URI or path of the table directory (``file://``, plain path, ``s3://``/``s3a://``,
            ``az://``/``abfs[s]://``, ``gs://``, ``hdfs://`` or ``hadoop+file://``).
        format: ``parquet`` (default), ``json``, ``csv``, ``orc``, ``text``, ``avro`` or ``delta``
            (Parquet files, and each batch one Delta commit with the transaction (table, batch)).
        partition_by: partition columns (Hive-style ``k=v`` directories).
        writer_options: Spark writer options (``compression``, ``header``, ...); recorded in the
            table, so readers use them too.
        staging_mode: ``rename`` or ``direct``; default by storage (rename where a rename is
            atomic - local disk, HDFS - direct on object stores).
        checkpoint_location: the query's checkpoint (``start`` sets it); enables offsets and
            input-file records, which make a recreated checkpoint safe.
        query_id: override the query id (default: Spark's persistent query id).
        storage_options: passed to the storage backend (e.g. S3 endpoint and credentials).
        compact_interval: ``.compact`` file every N manifest batches (1..10, Spark-readable).
        spark_reader_compact_interval: the ``spark.sql.streaming.fileSink.log.compactInterval``
            every Spark reader of the table uses (default Spark's 10); bounds ``compact_interval``.
        min_batches_to_retain, cleanup_delay: log retention (as Spark's
            ``minBatchesToRetain`` / ``fileSink.log.cleanupDelay``; default 100 and ``"10m"``).
        retention: hide manifest entries older than this at compaction (Spark's ``retention``).
        source_retention: forget committed input files older than this.
        watermark_columns: columns whose min/max is recorded per batch.
        lease_timeout: how long a silent writer keeps the table (default ``"60s"``, at least 1s).
        connect_handover_wait: Spark Connect only: how long a query's first batch waits for the
            previous query's writer on the same host to let the table go (default ``"60s"``).
        move_threads: parallel renames in ``rename`` mode.
        worker_moves_from: a batch with at least this many files (default 5,000) has its
            renames run as a Spark job on the workers instead of driver threads.
        step_retries: bounded retries of a failing commit step.
        description: free text recorded with the table's lease (who writes it).
        on_commit: callable receiving one dict per committed batch (metrics).
        storage_wrapper: ``"module:callable"``: the table's storage is ``callable(storage)``, built
            in the process that writes (a Spark Connect worker too). An extension point like
            Spark's ``checkpointFileManagerClass``; the test suite injects faults with it.
        progress_metrics: ``start`` observes rows and watermarks into the query's progress.
        spark_manifest: ``format="delta"`` only: also publish ``_spark_metadata`` (default True).
        delta_checkpoint_interval, delta_log_retention: ``format="delta"`` only: Delta table
            properties the first batch creates the table with (checkpoint every N versions,
            default 10; how long Delta keeps its log, default Delta's 30 days).
        schema_evolution: what a batch may change in the table's schema, which is recorded at the
            first batch and checked before anything of a batch is written (``SchemaMismatchError``):
            ``"none"`` (default), ``"add_columns"`` (new columns are added, nullable) or
            ``"add_and_widen"`` (also integer -> long, float -> double; not for Delta). A batch
            with a column narrower than the table's, or without a nullable one, is cast or filled
            to the table's schema in any mode. See ``docs/schema.md``.
        options: deprecated name of ``writer_options`` (a ``DeprecationWarning``).
    """

    def __init__(
        self,
        table: str,
        *,
        format: str = "parquet",
        partition_by: str | Iterable[str] | None = None,
        writer_options: Mapping[str, str] | None = None,
        staging_mode: StagingMode | None = None,
        checkpoint_location: str | None = None,
        query_id: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        compact_interval: int = 10,
        spark_reader_compact_interval: int = 10,
        min_batches_to_retain: int = 100,
        cleanup_delay: Duration = "10m",
        retention: Duration | None = None,
        source_retention: Duration | None = None,
        watermark_columns: str | Iterable[str] | None = None,
        lease_timeout: Duration = "60s",
        connect_handover_wait: Duration = "60s",
        move_threads: int = 8,
        worker_moves_from: int = 5_000,
        step_retries: int = 3,
        description: str = "",
        on_commit: OnCommit | None = None,
        storage_wrapper: str | None = None,
        progress_metrics: bool = True,
        spark_manifest: bool = True,
        delta_checkpoint_interval: int = 10,
        delta_log_retention: Duration | None = None,
        schema_evolution: str = "none",
        options: Mapping[str, str] | None = None,
    ) -> None:
        sink_options = SinkOptions.build(
            format=format, partition_by=partition_by, writer_options=writer_options, staging_mode=staging_mode,
            checkpoint_location=checkpoint_location, query_id=query_id, storage_options=storage_options,
            compact_interval=compact_interval, spark_reader_compact_interval=spark_reader_compact_interval,
            min_batches_to_retain=min_batches_to_retain, cleanup_delay=cleanup_delay, retention=retention,
            source_retention=source_retention, watermark_columns=watermark_columns, lease_timeout=lease_timeout,
            connect_handover_wait=connect_handover_wait, move_threads=move_threads, worker_moves_from=worker_moves_from,
            step_retries=step_retries, description=description, on_commit=on_commit,
            storage_wrapper=storage_wrapper, progress_metrics=progress_metrics,
            spark_manifest=spark_manifest, delta_checkpoint_interval=delta_checkpoint_interval,
            delta_log_retention=delta_log_retention, schema_evolution=schema_evolution, options=options,
        )
        sink_options.validate_delta(sink_options.format == "delta")
        super().__init__(table, sink_options)
        self.staging_mode = self.options.staging_mode or default_staging_mode(self.storage)
        if self.staging_mode == "direct" and not self.storage.usable_on_executors:
            raise ConfigError(
                f"staging_mode='direct' writes data files from Spark's workers through the table's storage, and "
                f"{self.storage.root_uri} is reached through the driver's JVM only; use staging_mode='rename' "
                "(the default there).",
                key="staging_mode",
            )
        if self.staging_mode == "direct" and self.options.format not in DIRECT_FORMATS:
            raise ConfigError(
                f"{self.storage.scheme}:// tables default to staging_mode='direct', which writes "
                f"{', '.join(DIRECT_FORMATS)}; for format={self.options.format!r} pass staging_mode='rename'.",
                key="staging_mode",
            )

    _PROCESS_STATE = (*BatchSink._PROCESS_STATE, "_writer")

    def _setup_process_state(self) -> None:
        super()._setup_process_state()
        self._writer: RenameWriter | DirectWriter | None = None

    def _make_committer(self) -> TableCommitter:
        return TableCommitter(self.storage, self.options.committer_options())

    @property
    def writer(self) -> RenameWriter | DirectWriter:
        if self._writer is None:
            writer_cls: type[RenameWriter | DirectWriter] = RenameWriter if self.staging_mode == "rename" else DirectWriter
            self._writer = writer_cls(
                self.storage,
                format=self.options.file_format,
                partition_by=self.options.partition_by,
                options=dict(self.options.writer_options),
            )
        return self._writer

    def _stage_and_commit(
        self, df: DataFrame, attempt: BatchAttempt, inputs: CommittedInputFilter, offsets: OffsetSeq | None
    ) -> CommitResult:
        t_stage = time.perf_counter()
        writer = self.writer
        watermarks: dict[str, dict[str, Any]]
        if writer.counts_rows and not self.options.watermark_columns:
            # the writer counts the rows itself: no observation to set up for each batch
            files = writer.write(df, attempt)
            rows, watermarks = sum(f.rows or 0 for f in files), {}
        else:
            observation = BatchObservation(self.options.watermark_columns)
            files = writer.write(observation.attach(df), attempt)
            rows, watermarks, _ = observation.result()
        skipped = inputs.skipped_rows()
        attempt.timings["stage"] = round((time.perf_counter() - t_stage) * 1000, 3)
        return self.committer.commit(
            attempt,
            files,
            input_files=inputs.new_inputs,
            num_rows=rows,
            num_skipped_rows=skipped,
            watermarks=watermarks,
            schema=df.schema.json(),
        )

    def _event_details(self, result: CommitResult) -> dict[str, Any]:
        record = result.record
        assert record is not None
        return {"numSkippedRows": record.num_skipped_rows, "watermarks": record.watermarks}

    # -- inspection --------------------------------------------------------------------------

    def watermarks(self) -> dict[str, dict[str, Any]]:
        """Latest committed watermarks per query id."""
        return {q: r.watermarks for q, r in self.committer.logs.commits.latest_per_query().items()}

    def committed_files(self) -> Iterable[str]:
        return [e.uri for e in self.committer.logs.require_manifest().files()]
