"""A sink's ``SinkObserver`` (``observability``): built on first use where the table is written,
with the table, the options, and how to read the query's progress and the table's small-file
backlog when the metrics are read."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..observability.audit_hook import AuditVerdict, mark_verdict
from ..observability.backlog import small_file_backlog
from ..observability.observer import SinkObserver
from ..storage import open_storage
from .options import SinkOptions

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

    from ..storage.base import Storage


class ObservedSink:
    """What ``BatchSink`` has of the observer: ``_observer`` (None: metrics and lineage off, or
    not built yet here) and the ``metrics_endpoint``."""

    options: SinkOptions
    table: str
    _query: StreamingQuery | None
    _session: Any
    _active_query: str | None

    @property
    def storage(self) -> Storage:
        raise NotImplementedError

    def _setup_observer(self) -> None:
        self._observer: SinkObserver | None = None
        self._observing = self.options.metrics is not None or self.options.lineage is not None

    def _open_observer(self) -> SinkObserver | None:
        """The sink's metrics and lineage hook, built on first use in the process that writes."""
        if self._observer is None and self._observing:
            self._observer = observer_for(self.storage.root_uri, self.table, self.options, self._running_query)
        return self._observer

    def _running_query(self) -> StreamingQuery | None:
        if self._query is not None:
            return self._query
        return self._session.streams.get(self._active_query) if self._session is not None and self._active_query is not None else None

    @property
    def metrics_endpoint(self) -> str | None:
        """The URL Prometheus scrapes this process' metrics at (the ``metrics`` option), once
        the table is open here; None without one."""
        observer = self._open_observer()
        return None if observer is None else observer.endpoint


def observer_for(table_uri: str, table: str, options: SinkOptions, query: Callable[[], Any]) -> SinkObserver:
    """The observer of a sink writing ``table`` (its root URI ``table_uri``); ``query()`` is the
    sink's running ``StreamingQuery`` or None."""

    def progress() -> Mapping[str, Any] | None:
        return last_progress(query())

    def backlog() -> tuple[int, int] | None:
        return small_file_backlog(open_storage(table, options.storage_options), options.compaction)

    def audit() -> AuditVerdict | None:
        return mark_verdict(open_storage(table, options.storage_options))

    return SinkObserver(table_uri, metrics=options.metrics, lineage=options.lineage, progress=progress, backlog=backlog, audit=audit)


def last_progress(query: Any) -> Mapping[str, Any] | None:
    """``query.lastProgress`` as JSON data (one call into Spark, which serialises it), or None."""
    if query is None:
        return None
    progress = query.lastProgress
    if progress is None:
        return None
    text = getattr(progress, "json", None)
    return json.loads(text) if isinstance(text, str) else dict(progress)
