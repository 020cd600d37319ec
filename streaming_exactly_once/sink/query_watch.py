"""Spark's own notice that a streaming query ended, delivered to the sink that writes for it.

A sink holds its table's lease (and a heartbeat thread) while its query runs. Users end
queries in many ways - ``query.stop()``, the Spark UI, an exception, ``availableNow`` running
dry, the session stopping - and almost never through the sink. So the sink asks Spark: one
``StreamingQueryListener`` per session, registered the first time a sink of that session needs
it, calls back on ``onQueryTerminated`` with the query's run id, and the sink releases the table.

The listener reads the end of a query only. pyspark's own Java-side wrapper of a Python listener
converts every event field by field before calling it - for a progress event about 450 py4j
calls, some 30 ms of Python and 50-70 ms of JVM CPU, for every batch of every query of the
session. So this one hands Spark a wrapper of its own that ignores every other event
(``_EndOnly``); if a pyspark release drops the internal name that takes it, pyspark's wrapper is
used, and only the cost returns.

Classic PySpark only: the listener runs in this driver process, where the sink's lease lives.
Under Spark Connect the ``foreachBatch`` function runs in a Python worker of the server, which
the server stops when the query ends; a lease left by a process that is gone is taken over at
once (``commit.protocol.lease``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from ..errors import ConfigError

log = logging.getLogger("streaming_exactly_once.sink")

OnEnd = Callable[[str], None]


class _EndOnly:
    """The Java listener interface, implemented through py4j: Spark calls it on its listener bus
    for every event of every query; it reads nothing but the run id of a query that ended."""

    def __init__(self, owner: _QueryEndListener) -> None:
        self.owner = owner

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        pass

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        self.owner.ended(str(jevent.runId().toString()), str(jevent.id().toString()))

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class _QueryEndListener(StreamingQueryListener):
    """Calls back on the end of a query *run*: a restarted query keeps its id (it is the
    checkpoint's) but gets a new run id, and Spark's listener bus may deliver the end of the
    previous run late - after the next run took the table."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: dict[str, list[OnEnd]] = {}
        self._java: Any = None

    @property
    def _jlistener(self) -> Any:
        """What ``streams.addListener`` registers with Spark: ``_EndOnly`` (module docstring)."""
        if self._java is None:
            from pyspark import SparkContext

            self._java = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_EndOnly(self))  # type: ignore[union-attr]
        return self._java

    def add(self, run_id: str, callback: OnEnd) -> None:
        with self._lock:
            callbacks = self._callbacks.setdefault(run_id, [])
            if callback not in callbacks:
                callbacks.append(callback)

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:  # through pyspark's own wrapper
        self.ended(str(event.runId), str(event.id))

    def ended(self, run_id: str, query_id: str) -> None:
        with self._lock:
            callbacks = self._callbacks.pop(run_id, [])
        for callback in callbacks:
            try:
                callback(run_id)
            except Exception:  # a listener must never break Spark's listener bus
                log.exception("releasing the table after query %s (run %s) ended failed", query_id, run_id)


_LISTENERS: dict[int, _QueryEndListener] = {}
_REGISTRY_LOCK = threading.Lock()


def watch_query_end(session: Any, run_id: str, callback: OnEnd) -> None:
    """Call ``callback(run_id)`` once the query run ``run_id`` started on ``session`` terminates."""
    key = id(session)
    with _REGISTRY_LOCK:
        listener = _LISTENERS.get(key)
        if listener is None:
            listener = _LISTENERS[key] = _QueryEndListener()
            session.streams.addListener(listener)
    listener.add(run_id, callback)


def spark_context_running() -> bool:
    """Whether this process still has a running classic SparkContext (a local check, no JVM call):
    ``spark.stop()`` ends every query without an ``onQueryTerminated``, so the lease's heartbeat
    asks this instead."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def session_running(query_id: str) -> Any | None:
    """The (classic) session on which query ``query_id`` is active, if any.

    ``foreachBatch`` hands the function a DataFrame of a *clone* of the session that started
    the query; listeners and ``streams.get`` only know the query on the original session."""
    try:
        from pyspark.sql import SparkSession

        for session in (SparkSession._instantiatedSession, SparkSession.getActiveSession()):
            if session is not None and session.streams.get(query_id) is not None:
                return session
    except Exception:  # no classic session in this process (Spark Connect worker)
        log.debug("no session runs query %s", query_id, exc_info=True)
    return None


#: Spark's execution of a query whose progress is tracked asynchronously (``asyncProgressTrackingEnabled``,
#: and real-time mode): a batch's offsets are written after it ran, and after a failure a batch id
#: may be re-run over another range of offsets.
ASYNC_EXECUTION = "AsyncProgressTrackingMicroBatchExecution"


def check_progress_tracking(df: Any) -> None:
    """Classic Spark: refuse a batch of a query that tracks its progress asynchronously. The sink
    keys a batch on (query, batch id) and reads its offsets from the checkpoint before it commits;
    Spark says such a query's "offset ranges for batch can be changed in case of failure", so a
    re-run batch id may hold other records (skipped as committed: lost), and its offsets may not be
    written yet. Spark refuses ``foreachBatch`` there unless its sink check is overridden."""
    try:
        query_id = df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        session = session_running(query_id) if query_id else None
        query = session.streams.get(query_id) if session is not None else None
        execution = query._jsq.streamingQuery().getClass().getSimpleName() if query is not None else ""
    except Exception:  # internal API: a Spark without it runs no such query
        log.debug("could not look up the execution of the query", exc_info=True)
        return
    if execution == ASYNC_EXECUTION:
        raise ConfigError(
            f"Query {query_id} tracks its progress asynchronously (asyncProgressTrackingEnabled, or real-time mode): "
            "Spark may run a batch id again over other offsets after a failure, and writes its offsets after the batch, "
            "so the sink cannot commit it exactly once. Nothing was written. Start the query without "
            "asyncProgressTrackingEnabled (sink.start never sets it).",
            key="asyncProgressTrackingEnabled",
        )


_SIGTERM_INSTALLED = False


def release_on_sigterm(release: Callable[[], None]) -> None:
    """Spark Connect: the server ends a query's ``foreachBatch`` worker with SIGTERM (on
    ``query.stop()``, a failure, a session timeout) without waiting for a running batch. Python's
    default action dies without ``atexit``; this handler first marks the table's lease released -
    so a writer on another host need not wait for it to expire - and then exits as SIGTERM would.
    A commit cut short here is a crash like any other: the next writer rolls it forward or back.

    Installed once per process, only from the main thread, and only over the default action."""
    global _SIGTERM_INSTALLED
    import os
    import signal

    if _SIGTERM_INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def handler(signum: int, frame: Any) -> None:
        # The release runs on its own thread, bounded: a signal handler interrupts the main
        # thread anywhere, possibly inside a lock the release needs, and a worker hung here
        # would hold the table until its lease expires. Exiting without the release is fine -
        # a writer on this host sees the process gone and takes over at once.
        releasing = threading.Thread(target=release, name="seo-sigterm-release", daemon=True)
        try:
            releasing.start()
            releasing.join(timeout=10.0)
        finally:
            os._exit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    _SIGTERM_INSTALLED = True
