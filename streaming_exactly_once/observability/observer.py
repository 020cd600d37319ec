"""The sink's one hook into metrics and lineage.

A sink with ``metrics`` or ``lineage`` on builds one ``SinkObserver`` in the process that
writes its table (never pickled, like the committer) and calls it at a batch's start, with the
batch's sources, at its end and at the query's start and end. A sink with both off builds none
and pays one attribute check per batch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..checkpoint.reader import InputFile
from ..commit.protocol.attempt import CommitResult
from .lineage_facts import BatchFacts
from .settings import LineageSettings, MetricsSettings
from .sink_metrics import AuditReader, BacklogReader, ProgressReader, SinkMetrics

log = logging.getLogger("streaming_exactly_once.observability")


class SinkObserver:
    """Metrics (``SinkMetrics``) and lineage (``LineageRun``) of one sink's table."""

    def __init__(
        self,
        table: str,
        *,
        metrics: MetricsSettings | None,
        lineage: LineageSettings | None,
        progress: ProgressReader | None = None,
        backlog: BacklogReader | None = None,
        audit: AuditReader | None = None,
    ) -> None:
        self.table = table
        self.metrics: SinkMetrics | None = None
        self.endpoint: str | None = None
        if metrics is not None:
            from .otel_export import export_through_otel

            self.metrics = SinkMetrics(table, progress=progress, backlog=backlog, audit=audit)
            if metrics.port is not None:
                from .prometheus_export import serve

                self.endpoint = serve(metrics.host, metrics.port)
                log.info("metrics of %s at %s", table, self.endpoint)
            export_through_otel()
        self.lineage = None
        if lineage is not None:
            from .lineage_emitter import LineageRun

            self.lineage = LineageRun(table, lineage)
        self._sources: tuple[str | None, Sequence[str | None], Sequence[InputFile] | None] = (None, (), None)
        self._rejected_before = 0

    # -- the query ------------------------------------------------------------------------------

    def query_started(self, query: str, name: str | None = None) -> None:
        if self.metrics is not None:
            self.metrics.query_started(query)
        if self.lineage is not None:
            self.lineage.query_started(query, name)

    def query_ended(self) -> None:
        if self.metrics is not None:
            self.metrics.query_ended()
        if self.lineage is not None:
            self.lineage.query_ended()

    # -- a batch --------------------------------------------------------------------------------

    def batch_started(self, rejected_rows_so_far: int = 0) -> None:
        """``rejected_rows_so_far``: the sink's running count of rejected rows (the batch's are
        the difference at its end)."""
        self._rejected_before = rejected_rows_so_far
        self._sources = (None, (), None)
        if self.metrics is not None:
            self.metrics.batch_started()

    def batch_sources(self, checkpoint: str | None, end_offsets: Sequence[str | None], input_files: Sequence[InputFile] | None) -> None:
        """What the batch read: its query's checkpoint, its end offsets and input files."""
        self._sources = (checkpoint, end_offsets, input_files)

    def batch_done(self, result: CommitResult, *, rejected_rows_so_far: int = 0, lease: Any = None) -> None:
        rejected = rejected_rows_so_far - self._rejected_before
        epoch, took_over = _lease_state(lease)
        if self.metrics is not None:
            self.metrics.batch_done(result, rejected_rows=rejected, epoch=epoch, took_over=took_over)
        if self.lineage is not None and result.status == "committed" and result.record is not None:
            checkpoint, ends, inputs = self._sources
            self.lineage.batch_done(BatchFacts.of(result, checkpoint=checkpoint, end_offsets=ends, input_files=inputs, rows_rejected=rejected))

    def batch_failed(self, query: str | None, spark_batch: int | None, error: BaseException, *, lease: Any = None) -> None:
        epoch, took_over = _lease_state(lease)
        if self.metrics is not None:
            self.metrics.batch_refused(query, error, epoch=epoch, took_over=took_over)
        if self.lineage is not None:
            self.lineage.batch_failed(query, spark_batch, error)

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        if self.lineage is not None:
            self.lineage.close()


def _lease_state(lease: Any) -> tuple[int | None, bool]:
    """The lease's epoch and whether it was taken over from a writer that had not let go."""
    if lease is None:
        return None, False
    return lease.epoch, bool(getattr(lease, "took_over_from", None))
