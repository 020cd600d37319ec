"""The table's lease follows the query's life.

The sink holds the table's lease from the query's start (or its first batch) until the query
ends, however it ends: ``query.stop()``, a failure, the end of an ``availableNow`` run or the
session stopping. Spark tells us (``sink.query_watch``); the lease is released and the heartbeat
stops, so the next query on the table - in this process or another - starts at once. A sink
object may serve one query after another, never two at once.
"""

from __future__ import annotations

import threading
from typing import Any, Generic, TypeVar

from pyspark.sql.streaming.query import StreamingQuery

from ..commit.writer import Writer
from ..errors import ConcurrentWriterError, SinkInUseError
from ..manifest.paths import canonical_uri
from ..storage.base import Storage
from ..storage.posix_calls import same_local_directory
from .observing import ObservedSink

#: The committer a sink drives: ``TableCommitter`` for one table, ``GroupCommitter`` for a group.
CommitterT = TypeVar("CommitterT", bound=Writer)


def _same_directory(a: Storage, b: Storage) -> bool:
    """Whether two sinks' roots are one table: the same URI once canonical, or on a local disk
    the same directory through a symbolic link (the writer then refuses the second spelling
    with a message saying which to use - not a concurrent writer)."""
    if canonical_uri(a.root_uri) == canonical_uri(b.root_uri):
        return True
    return a.scheme == b.scheme == "file" and same_local_directory(a.root_uri, b.root_uri)


class QueryLease(ObservedSink, Generic[CommitterT]):
    """The lease-holding part of ``sink.batch_sink.BatchSink``, whose process state it uses."""

    table: str
    _lock: threading.Lock
    _committer: CommitterT | None
    _query: StreamingQuery | None
    _active_query: str | None
    _active_run: str | None
    _session: Any

    @property
    def committer(self) -> CommitterT:
        raise NotImplementedError

    def _other_sinks(self) -> list[QueryLease[Any]]:
        """The other live sinks of this process."""
        raise NotImplementedError

    def _holds_table(self) -> bool:
        return self._committer is not None and self._committer.lease.epoch is not None

    def _query_running(self) -> bool:
        if self._query is not None and self._query.isActive:
            return True
        return self._session is not None and self._active_query is not None and self._session.streams.get(self._active_query) is not None

    def _take_table(self) -> None:
        """Open the table for writing in this process (``start``, ``open``). A sink of this
        process whose query has ended hands the lease over now (Spark's notice of the end may
        still be on its way)."""
        self._take_from_other_sinks()
        with self._lock:
            if self._active_query is not None and not self._query_running():
                # Our own earlier query has ended, and Spark's notice of it may still be on its way:
                # hand the lease over here, so that a late notice finds nothing left to release
                # (it would otherwise free the lease this open just took).
                self._release_now(only_for=None)
            self.committer.ensure_open()
            self._open_observer()

    def _take_from_other_sinks(self) -> None:
        """Another sink of this process on the same table hands it over if its query has ended.
        Asked of every such sink, not only one holding an epoch: a release Spark's notice started
        on the listener thread gives the epoch up before its "released" heartbeat is written, and
        ``_release`` waits for it (it holds the other sink's lock) instead of reading a lease that
        still looks alive."""
        root = self.storage.root_uri
        for other in self._other_sinks():
            if other._committer is None or not _same_directory(other.storage, self.storage):
                continue
            if other._query_running():
                raise ConcurrentWriterError(
                    f"Table {root} is being written by query {other._active_query} in this process. Only one "
                    "writer may write a table: stop the other query first.",
                    table=root,
                )
            other._release(120.0)

    def _adopt_query(self, query_id: str, session: Any, *, run_id: str | None = None) -> None:
        """From now on this process commits batches of run ``run_id`` of ``query_id`` (and only of it)."""
        if (self._active_query, self._active_run) == (query_id, run_id):
            return
        if self._active_query not in (None, query_id) and self._query_running():
            raise SinkInUseError(
                f"This sink already writes {self.table} for the running query {self._active_query}; query "
                f"{query_id} called it too. One sink object serves one query at a time: give each query its "
                "own sink (and its own table).",
                table=self.table,
            )
        self._active_query = query_id
        self._active_run = run_id
        self._session = session
        if self._observer is not None:
            self._observer.query_started(query_id, self._query.name if self._query is not None else None)
        if session is not None and run_id is not None:
            from .query_watch import spark_context_running, watch_query_end

            watch_query_end(session, run_id, self._query_ended)
            # Stopping the session ends the query without telling listeners: the heartbeat asks.
            self.committer.lease.holder_alive = spark_context_running

    def _query_ended(self, run_id: str) -> None:
        """Spark's notice that run ``run_id`` ended: only that run's lease is released - a late
        notice of an earlier run of the same query finds the next run holding the table."""
        if self._active_run == run_id:
            self._release(120.0, only_for=run_id)

    def _release(self, timeout_s: float, *, only_for: str | None = None) -> None:
        """Release the lease once no batch is in flight (waits for one up to ``timeout_s``)."""
        got = self._lock.acquire(timeout=timeout_s)
        try:
            self._release_now(only_for=only_for)
        finally:
            if got:
                self._lock.release()

    def _release_now(self, *, only_for: str | None) -> None:
        """``_release`` with ``_lock`` held; ``only_for``: a run id, released only if still ours."""
        if only_for is not None and self._active_run != only_for:
            return
        if self._query is not None and (only_for is None or str(self._query.runId) == only_for):
            self._query = None
        if self._observer is not None and self._active_query is not None:
            self._observer.query_ended()
        self._active_query = None
        self._active_run = None
        self._session = None
        if self._committer is not None:
            self._committer.close()
