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

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from ..checkpoint.offset_seq import OffsetSeq
from ..commit.committer import BatchAttempt, CommitResult, TableCommitter
from ..commit.table_schema import read_only_schema, table_format_of
from ..errors import ConfigError
from .batch_metrics import BatchObservation
from .batch_sink import BatchSink
from .direct_writer import DirectWriter
from .input_filter import BatchFilters
from .keywords import SinkKeywords, check_keywords, document
from .options import DIRECT_FORMATS, SinkOptions, default_staging_mode
from .record_probe import RecordProbe
from .rename_writer import RenameWriter
from .schema_fit import conformer

log = logging.getLogger("streaming_exactly_once.sink")

if TYPE_CHECKING:
    from typing_extensions import Unpack


class ExactlyOnceSink(BatchSink[TableCommitter]):
    """Exactly-once file output for a streaming query; see the module docstring.

    Every option is keyword-only; durations take ``"500ms"``, ``"30s"``, ``"10m"``, ``"2h"``,
    ``"1d"``, Spark's ``"10 seconds"`` or ``"1 hour 30 minutes"``, a ``timedelta`` or seconds. A misspelt option is a ``TypeError``, a bad value a
    ``ConfigError`` naming the option.

    Args:
        table: URI or path of the table directory (``file://``, plain path, ``s3://``/``s3a://``,
            ``az://``/``abfs[s]://``, ``gs://``, ``hdfs://`` or ``hadoop+file://``).
    """

    def __init__(self, table: str, **options: Unpack[SinkKeywords]) -> None:
        check_keywords(options, SinkKeywords, "ExactlyOnceSink")
        sink_options = SinkOptions.build(options)
        sink_options.validate_table_formats(sink_options.table_formats)
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

    def _runs_on_workers(self) -> str | None:
        return "staging_mode='direct', whose files the workers write" if self.staging_mode == "direct" else None

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
                options=self.options.spark_writer_options() if self.staging_mode == "rename" else dict(self.options.writer_options),
            )
        return self._writer

    def _stage_and_commit(self, df: DataFrame, attempt: BatchAttempt, inputs: BatchFilters, offsets: OffsetSeq | None) -> CommitResult:
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
        attempt.ledger = replace(attempt.ledger, drop_reasons=inputs.drop_reasons())
        attempt.timings["stage"] = round((time.perf_counter() - t_stage) * 1000, 3)
        return self.committer.commit(
            attempt,
            files,
            input_files=inputs.new_inputs,
            num_rows=rows,
            num_skipped_rows=skipped,
            watermarks=watermarks,
            schema=df.schema.json(),
            no_data=inputs.must_commit,
        )

    def _record_probe(self, fit: Callable[[DataFrame], DataFrame]) -> RecordProbe | None:
        if self.options.file_format == "text":
            return None  # one column, no offsets: nothing to find a record by
        return RecordProbe(project=fit, table_rows=self._committed_rows, columns=self.options.record_columns or None)

    def _committed_rows(self, session: SparkSession, schema: StructType) -> DataFrame | None:
        """The table's committed rows, read with ``schema`` from the files its manifest lists."""
        paths = [entry.uri for entry in self.committer.logs.require_manifest().files()]
        if not paths:
            return None
        reader = session.read.format(self.options.file_format).options(**self.options.writer_options)
        return reader.schema(schema).option("basePath", self.storage.root_uri).load(paths)

    # -- the table's schema (``sink.schema_fit``, ``commit.table_schema``) --------------------

    def _check_start_schema(self, stream_df: DataFrame, *, holds_table: bool) -> None:
        """At ``start``: a stream whose schema the table would refuse fails now, with the same
        ``SchemaMismatchError`` as its first batch would, before its query runs. Without the
        table (Spark Connect takes it at the first batch) the schema is read, nothing written."""
        options = self.options.committer_options()
        if holds_table:
            schemas = self.committer.schemas
        else:
            try:
                schemas = read_only_schema(
                    self.storage,
                    evolution=options.schema_evolution,
                    file_format=options.format,
                    table_format=table_format_of(delta=options.delta is not None, iceberg=options.iceberg is not None),
                )
            except Exception as exc:  # noqa: BLE001 - e.g. a store only the server reaches: the first batch checks
                log.info("the table's schema could not be read before the query started (%s); its first batch is checked", exc)
                return
        try:
            schemas.check(stream_df.schema.json(), self.options.partition_by, what="The stream")
        except BaseException:
            if holds_table:
                self._release(120.0)  # the query never starts: the next writer need not wait
            raise

    def _fit_schema(self, df: DataFrame, what: str) -> Callable[[DataFrame], DataFrame]:
        """The batch against the table's schema, before anything of it is written
        (``SchemaMismatchError``); the projection that gives it the table's columns and types."""
        return conformer(self.committer.schemas.check(df.schema.json(), self.options.partition_by, what=what))

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


document(ExactlyOnceSink, SinkKeywords, "table")
