"""Sending a sink's OpenLineage events off the batch's path, within a budget.

The batch only hands its ``BatchFacts`` over (or folds them into the pending ones, see
below); a daemon thread builds the events, reads the batch's start offsets from the query's
checkpoint, and emits through openlineage-python's client - whose transport (HTTP, file,
console, Kafka, ...) is the user's. A slow or unreachable lineage server never delays a commit:
past ``queue`` waiting events, new ones are dropped and counted (``seo_lineage_events_total``).

**Throttle.** With ``throttle``, a batch committed sooner than that after the last emitted
one is folded into the pending facts (counts added, offsets and versions of the last), emitted
with the first batch after the interval, or when the query lets the table go: at most one
batch event per interval, and no batch is left out of the lineage.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..checkpoint.reader import SparkCheckpoint
from ..storage import open_storage
from .audit_hook import audit_verdict
from .catalog import metric
from .lineage_facts import BatchFacts, new_run_id
from .settings import LineageSettings
from .store import STORE

log = logging.getLogger("streaming_exactly_once.observability")

EVENTS = metric("seo_lineage_events")
_STOP = object()


class LineageRun:
    """One sink's lineage: its query's run and its batches' runs (module docstring)."""

    def __init__(self, table: str, settings: LineageSettings, *, client: Any = None) -> None:
        self.table = table
        self.settings = settings
        self._client = client
        self.job = settings.job or table
        self.query: str | None = None
        self.run_id: str | None = None
        self._failed: str | None = None
        self._pending: BatchFacts | None = None
        self._last_emit: float | None = None
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=settings.queue)
        self._thread: threading.Thread | None = None

    # -- the batch's thread -------------------------------------------------------------------

    def query_started(self, query: str, name: str | None = None) -> None:
        if self.query == query and self.run_id is not None:
            return
        if self.run_id is not None:
            self.query_ended()
        self.query, self.run_id, self._failed = query, new_run_id(), None
        if name and not self.settings.job:
            self.job = name
        run_id, job, at_ms = self.run_id, self.job, time.time() * 1000  # bound now: the thread builds it later
        self._send(lambda ev: ev.query_event("START", run_id=run_id, job=job, settings=self.settings, at_ms=at_ms))

    def _run(self) -> str:
        assert self.run_id is not None
        return self.run_id

    def batch_done(self, facts: BatchFacts) -> None:
        """A committed batch: emitted now, or folded into the next event (the throttle)."""
        if self.query != facts.query_id:
            self.query_started(facts.query_id)
        self._failed = None
        self._pending = facts if self._pending is None else self._pending.fold(facts)
        now = time.monotonic()
        if self.settings.throttle_ms and self._last_emit is not None and (now - self._last_emit) * 1000 < self.settings.throttle_ms:
            STORE.inc(EVENTS, (self.table, facts.query_id, "throttled"))
            return
        self._last_emit = now
        self._flush()

    def batch_failed(self, query: str | None, spark_batch: int | None, error: BaseException) -> None:
        if query is not None and self.query != query:
            self.query_started(query)
        if self.run_id is None:
            return
        text = f"{type(error).__name__}: {error}"
        self._failed = text
        parent, at_ms, job, query_id = self._run(), time.time() * 1000, self.job, self.query or ""
        self._send(
            lambda ev: ev.failed_batch_event(
                query_id=query_id,
                spark_batch=spark_batch,
                run_id=new_run_id(),
                parent_run_id=parent,
                job=job,
                settings=self.settings,
                error=text,
                at_ms=at_ms,
            )
        )

    def query_ended(self) -> None:
        """The query let the table go: the pending batches, then its run's end."""
        if self.run_id is None:
            return
        self._flush()
        failed, at_ms, job = self._failed, time.time() * 1000, self.job
        state = "FAIL" if failed else "COMPLETE"
        run_id = self._run()
        self._send(lambda ev: ev.query_event(state, run_id=run_id, job=job, settings=self.settings, at_ms=at_ms, error=failed))
        self.run_id = None
        self.query = None

    def _flush(self) -> None:
        facts, self._pending = self._pending, None
        if facts is None or self.run_id is None:
            return
        parent, job = self.run_id, self.job
        self._send(lambda ev: self._batch_event(ev, facts, parent, job))

    def _send(self, build: Callable[[Any], Any]) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="seo-lineage", daemon=True)
            self._thread.start()
        try:
            self._queue.put_nowait(build)
        except queue.Full:
            STORE.inc(EVENTS, (self.table, self.query or "", "dropped"))

    # -- the sender's thread ------------------------------------------------------------------

    def _batch_event(self, events: Any, facts: BatchFacts, parent: str, job: str) -> Any:
        start = None
        if facts.checkpoint is not None:
            try:
                start = SparkCheckpoint(open_storage(facts.checkpoint)).start_offsets(facts.first_spark_batch)
            except Exception as exc:  # noqa: BLE001 - the event goes out without them
                log.debug("start offsets of batch %s unknown: %s", facts.first_spark_batch, exc)
        return events.batch_event(
            facts,
            table=self.table,
            run_id=new_run_id(),
            parent_run_id=parent,
            job=job,
            settings=self.settings,
            start_offsets=start,
            audit=audit_verdict(self.table),
        )

    def client(self) -> Any:
        if self._client is None:
            from openlineage.client import OpenLineageClient

            self._client = OpenLineageClient(config={"transport": dict(self.settings.transport)}) if self.settings.transport else OpenLineageClient()
        return self._client

    def _loop(self) -> None:
        from . import lineage_events

        while True:
            build = self._queue.get()
            try:
                if build is _STOP:
                    return
                event = build(lineage_events)
                self.client().emit(event)
                outcome = "emitted"
            except Exception as exc:  # noqa: BLE001 - lineage must never break the stream
                log.warning("an OpenLineage event of %s could not be sent: %r", self.table, exc)
                outcome = "failed"
            finally:
                self._queue.task_done()
            STORE.inc(EVENTS, (self.table, self.query or "", outcome))

    def close(self, timeout_s: float = 10.0) -> None:
        """End the query's run, send what is waiting (up to ``timeout_s``) and stop the thread."""
        self.query_ended()
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            return
        thread.join(timeout_s)
