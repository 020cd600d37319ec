"""One sink's metrics: what its batches record, and what is computed when the metrics are read.

A batch records the figures its commit already has - the ``CommitResult``'s record and step
timings - plus one monotonic stamp at its start: no storage call, no Spark call. What changes
between batches (the age of the last commit, the batch in flight, a source's lag, event-time
freshness, the small-file backlog, the audit's verdict) is computed in ``samples`` when an
exporter reads the store; the slow ones (Spark's progress, the manifest) at most every
``PROGRESS_EVERY_S`` / ``BACKLOG_EVERY_S``, on the exporter's thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..commit.protocol.attempt import CommitResult
from ..commit.protocol.sequence import commit_ms
from ..errors import WriterFencedError
from .audit_hook import AuditVerdict, audit_verdict
from .catalog import metric
from .freshness import newest_event_times, source_lag
from .store import STORE, Labels, MetricStore, Sample

log = logging.getLogger("streaming_exactly_once.observability")

PROGRESS_EVERY_S = 1.0
BACKLOG_EVERY_S = 60.0

BATCHES = metric("seo_batches")
REFUSED = metric("seo_batches_refused")
ROWS_IN = metric("seo_rows_in")
ROWS_WRITTEN = metric("seo_rows_written")
ROWS_DUPLICATE = metric("seo_rows_duplicate")
ROWS_REJECTED = metric("seo_rows_rejected")
FILES = metric("seo_files_written")
BYTES = metric("seo_bytes_written")
BATCH_SECONDS = metric("seo_batch_duration_seconds")
COMMIT_SECONDS = metric("seo_commit_duration_seconds")
PHASE_SECONDS = metric("seo_commit_phase_duration_seconds")
LAST_COMMIT = metric("seo_last_commit_timestamp_seconds")
LAST_COMMIT_AGE = metric("seo_last_commit_age_seconds")
IN_FLIGHT = metric("seo_batch_in_flight_seconds")
QUERY_UP = metric("seo_query_up")
LAST_BATCH = metric("seo_last_batch_id")
SOURCE_LAG = metric("seo_source_lag_records")
EVENT_TIME = metric("seo_event_time_max_timestamp_seconds")
EVENT_LAG = metric("seo_event_time_lag_seconds")
LIVE_FILES = metric("seo_live_files")
AWAITING = metric("seo_files_awaiting_compaction")
EPOCH = metric("seo_lease_epoch")
TAKEOVERS = metric("seo_lease_takeovers")
FENCED = metric("seo_writer_fenced")
AUDIT_PASSED = metric("seo_audit_passed")
AUDIT_TIME = metric("seo_audit_timestamp_seconds")

#: ``(live data files, files awaiting compaction)`` of the table, read from its manifest
BacklogReader = Callable[[], tuple[int, int] | None]
#: the query's latest Spark progress as JSON-like data, or None
ProgressReader = Callable[[], Mapping[str, Any] | None]
#: the table's latest audit verdict, or None while there is none
AuditReader = Callable[[], AuditVerdict | None]


class SinkMetrics:
    """The metrics of one table written by one sink in this process (module docstring)."""

    def __init__(
        self,
        table: str,
        *,
        store: MetricStore = STORE,
        progress: ProgressReader | None = None,
        backlog: BacklogReader | None = None,
        audit: AuditReader | None = None,
    ) -> None:
        self.table = table
        self.store = store
        self.progress = progress
        self.backlog = backlog
        self.audit = audit if audit is not None else (lambda: audit_verdict(table))
        self.query: str | None = None
        self._up_since = time.time()
        self._last_commit: float | None = None
        self._batch_start: float | None = None
        self._event_times: dict[str, float] = {}
        self._epoch: int | None = None
        self._progress_at = -PROGRESS_EVERY_S
        self._lag: list[tuple[str, str, int]] = []
        self._backlog_at = -BACKLOG_EVERY_S
        self._backlog: tuple[int, int] | None = None
        store.add_provider(self)

    def _labels(self, query: str | None = None) -> Labels:
        return (self.table, query or self.query or "")

    # -- the query's life -------------------------------------------------------------------------

    def query_started(self, query: str) -> None:
        """This process writes the table for ``query`` from now on; an earlier query's series
        of this table are dropped (a recreated checkpoint must not leave them behind forever)."""
        if self.query not in (None, query):
            old = self.query
            self.store.forget(lambda labels: not (len(labels) > 1 and labels[0] == self.table and labels[1] == old))
            self._event_times.clear()
        self.query = query
        self._up_since = time.time()
        self._last_commit = None
        self.store.set(QUERY_UP, self._labels(), 1.0)

    def query_ended(self) -> None:
        self._batch_start = None
        if self.query is not None:
            self.store.set(QUERY_UP, self._labels(), 0.0)

    # -- a batch ----------------------------------------------------------------------------------

    def batch_started(self) -> None:
        self._batch_start = time.perf_counter()

    def batch_done(self, result: CommitResult, *, rejected_rows: int = 0, epoch: int | None = None, took_over: bool = False) -> None:
        """Record a batch the sink finished: committed, a skipped replay or empty (one lock)."""
        started, self._batch_start = self._batch_start, None
        if self.query != result.query_id:
            self.query_started(result.query_id)
        labels = self._labels()
        incs: list[Sample] = [(BATCHES, (*labels, result.status), 1.0)]
        sets: list[Sample] = []
        observations: list[Sample] = []
        if started is not None:
            observations.append((BATCH_SECONDS, labels, time.perf_counter() - started))
        self._lease(epoch, took_over, incs, sets)
        record = result.record
        if result.status == "committed" and record is not None:
            written, duplicate = record.num_rows or 0, record.num_skipped_rows
            incs += [
                (ROWS_WRITTEN, labels, written),
                (ROWS_DUPLICATE, labels, duplicate),
                (ROWS_IN, labels, written + duplicate),
                (ROWS_REJECTED, labels, rejected_rows),
                (FILES, labels, record.num_files),
                (BYTES, labels, record.num_bytes),
            ]
            observations.append((COMMIT_SECONDS, labels, commit_ms(result.timings) / 1000))
            observations += [(PHASE_SECONDS, (*labels, phase.split(":", 1)[0]), ms / 1000) for phase, ms in result.timings.items()]
            self._last_commit = now = time.time()
            sets.append((LAST_COMMIT, labels, now))
            if result.batch_id is not None:
                sets.append((LAST_BATCH, labels, result.batch_id))
            if record.watermarks:
                for column, seconds in newest_event_times(record.watermarks).items():
                    newest = self._event_times[column] = max(seconds, self._event_times.get(column, seconds))
                    sets.append((EVENT_TIME, (*labels, column), newest))
        self.store.apply(incs=incs, sets=sets, observations=observations)

    def batch_refused(self, query: str | None, error: BaseException, *, epoch: int | None = None, took_over: bool = False) -> None:
        """Record a batch that raised: nothing of it was published."""
        self._batch_start = None
        incs: list[Sample] = [(REFUSED, (*self._labels(query), type(error).__name__), 1.0)]
        sets: list[Sample] = []
        if isinstance(error, WriterFencedError):
            incs.append((FENCED, (self.table,), 1.0))
        self._lease(epoch, took_over, incs, sets)
        self.store.apply(incs=incs, sets=sets)

    def _lease(self, epoch: int | None, took_over: bool, incs: list[Sample], sets: list[Sample]) -> None:
        if epoch is None or epoch == self._epoch:
            return
        self._epoch = epoch
        sets.append((EPOCH, (self.table,), epoch))
        if took_over:
            incs.append((TAKEOVERS, (self.table,), 1.0))

    # -- computed when read -----------------------------------------------------------------------

    def samples(self) -> Iterator[Sample]:
        now, mono = time.time(), time.monotonic()
        if self.query is not None:
            labels = self._labels()
            yield LAST_COMMIT_AGE, labels, now - (self._last_commit or self._up_since)
            started = self._batch_start
            yield IN_FLIGHT, labels, 0.0 if started is None else max(0.0, time.perf_counter() - started)
            for column, seconds in self._event_times.items():
                yield EVENT_LAG, (*labels, column), now - seconds
            for topic, partition, behind in self._source_lag(mono):
                yield SOURCE_LAG, (*labels, topic, partition), float(behind)
        backlog = self._table_backlog(mono)
        if backlog is not None:
            yield LIVE_FILES, (self.table,), float(backlog[0])
            yield AWAITING, (self.table,), float(backlog[1])
        verdict = self._audit()
        if verdict is not None:
            yield AUDIT_PASSED, (self.table,), 1.0 if verdict.passed else 0.0
            yield AUDIT_TIME, (self.table,), verdict.timestamp

    def _source_lag(self, mono: float) -> list[tuple[str, str, int]]:
        if self.progress is not None and mono - self._progress_at >= PROGRESS_EVERY_S:
            self._progress_at = mono
            try:
                self._lag = list(source_lag(self.progress()))
            except Exception as exc:  # noqa: BLE001 - a metric must never fail a scrape
                log.debug("reading the query's progress for source lag failed: %s", exc)
        return self._lag

    def _table_backlog(self, mono: float) -> tuple[int, int] | None:
        if self.backlog is not None and mono - self._backlog_at >= BACKLOG_EVERY_S:
            self._backlog_at = mono
            try:
                self._backlog = self.backlog()
            except Exception as exc:  # noqa: BLE001
                log.debug("reading the small-file backlog of %s failed: %s", self.table, exc)
        return self._backlog

    def _audit(self) -> AuditVerdict | None:
        try:
            return self.audit()
        except Exception as exc:  # noqa: BLE001
            log.debug("reading the audit verdict of %s failed: %s", self.table, exc)
            return None

    def close(self) -> None:
        self.query_ended()
