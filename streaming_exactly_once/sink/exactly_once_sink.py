"""``ExactlyOnceSink``: the ``foreachBatch`` callable that commits each micro-batch exactly once.

::

    sink = ExactlyOnceSink("file:///data/events", format="parquet", partition_by=["day"])
    query = sink.start(stream_df, checkpoint_location="file:///chk/events")
    # or: stream_df.writeStream.foreachBatch(sink).option("checkpointLocation", ...).start()

Per batch (details in ``commit.committer``)::

    (query id, batch id) committed? --yes--> skip (Spark replayed it)
          | no
    intent _seo/offsets/M --> drop rows of already-committed input files --> stage the data
          (rename: Spark writer under _seo/staging; direct: executors write final names)
    --> WAL _seo/wal/M (create-if-absent) --> [move files] --> _spark_metadata/M  <- visible here
    --> _seo/sources/M --> _seo/commits/M --> clean staging --> delete WAL

A crash anywhere rolls forward (after the WAL) or back (before it) on restart, never both.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from pyspark.sql import DataFrame

from ..checkpoint.offset_seq import OffsetSeq
from ..commit.committer import BatchAttempt, CommitResult, TableCommitter
from ..errors import ConfigError
from .batch_metrics import BatchObservation
from .batch_sink import BatchSink
from .direct_writer import DirectWriter
from .input_filter import CommittedInputFilter
from .options import DIRECT_FORMATS
from .rename_writer import RenameWriter


class ExactlyOnceSink(BatchSink[TableCommitter]):
    """Exactly-once file output for a streaming query; see the module docstring.

    Args:
        table: URI or path of the table directory (``file://``, plain path, ``s3://``/``s3a://``,
            ``az://``/``abfs[s]://``, ``gs://``, ``hdfs://`` or ``hadoop+file://``).
        format: ``parquet`` (default), ``json``, ``csv``, ``orc``, ``text``, ``avro`` or ``delta``
            (Parquet files, and each batch one Delta commit with the transaction (table, batch)).
        spark_manifest: ``format="delta"`` only: also publish ``_spark_metadata`` (default True).
        delta_checkpoint_interval, delta_log_retention: ``format="delta"`` only: Delta table
            properties the first batch creates the table with (checkpoint every N versions,
            default 10; how long Delta keeps its log, default Delta's 30 days).
        partition_by: partition columns (Hive-style ``k=v`` directories).
        options: Spark writer options (``compression``, ``header``, ...).
        staging_mode: ``rename`` or ``direct``; default by storage (rename on local disk).
        checkpoint_location: the query's checkpoint (``start`` sets it); enables offsets and
            input-file records, which make a recreated checkpoint safe.
        query_id: override the query id (default: Spark's persistent query id).
        storage_options: passed to the storage backend (e.g. S3 endpoint and credentials).
        compact_interval: ``.compact`` file every N manifest batches (1..10, Spark-readable).
        min_batches_to_retain, cleanup_delay: log retention (as Spark's
            ``minBatchesToRetain`` / ``fileSink.log.cleanupDelay``).
        retention: hide manifest entries older than this at compaction (Spark's ``retention``).
        source_retention: forget committed input files older than this.
        watermark_columns: columns whose min/max is recorded per batch.
        lease_timeout: how long a silent writer keeps the table (default 60s).
        move_threads: parallel renames in ``rename`` mode.
        worker_moves_from: a batch with at least this many files (default 5,000) has its
            renames run as a Spark job on the workers instead of driver threads.
        step_retries: bounded retries of a failing commit step.
        on_commit: callable receiving one dict per committed batch (metrics).
    """

    def __init__(self, table: str, **options: Any) -> None:
        super().__init__(table, **options)
        self.options.reject_group_options("ExactlyOnceSink")
        self.staging_mode = self.options.staging_mode or self.storage.default_staging_mode
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
        observation = BatchObservation(self.options.watermark_columns)
        files = self.writer.write(observation.attach(df), attempt)
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
