"""A refused batch's error reaches the user as the library raised it, not 60 lines down a py4j
traceback.

Spark wraps whatever ``foreachBatch`` raises in a ``StreamingQueryException`` whose text opens
with Spark's own error classes and the Python proxy's traceback. The query ``sink.start``
returns is Spark's object with two methods taken over: ``awaitTermination()`` raises, and
``exception()`` returns, an error that *is* both - an instance of the library's class
(``OffsetGapError``, with its message and attributes) and of Spark's exception class - so an
``except OffsetGapError`` and an existing ``except StreamingQueryException`` both catch it, and
its text is the library's message. Classic Spark runs the batch in this process: the error is
the very one raised (its traceback included). Under Spark Connect the batch ran in the server;
the error is rebuilt from the table's refusal record (``table.refusal``), which every refused
batch writes. Only errors Spark's message shows came from the library are surfaced; any other
failure is raised as Spark raised it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pyspark.errors import StreamingQueryException

from ..errors import ExactlyOnceError
from ..table.refusal import read_refusal, write_refusal

if TYPE_CHECKING:
    from types import TracebackType

    from pyspark.sql.streaming.query import StreamingQuery

    from ..storage.base import Storage

log = logging.getLogger("streaming_exactly_once.sink")


class RefusingSink(Protocol):
    """What of a sink the surfacing needs: its table, and its last refused batch's error."""

    @property
    def storage(self) -> Storage: ...

    last_error: ExactlyOnceError | None


def note_refusal(storage: Callable[[], Storage], error: ExactlyOnceError, *, query_id: str | None, batch_id: int) -> None:
    """A batch raised the library's ``error``: recorded in the table (a failure to record it
    is logged, never raised over the batch's own error)."""
    try:
        write_refusal(storage(), error, query_id=query_id, spark_batch_id=batch_id)
    except Exception as exc:  # noqa: BLE001 - the batch's error is what the user must see
        log.warning("could not record the refused batch %d in the table: %s", batch_id, exc)


def _signature(error: ExactlyOnceError) -> str:
    """What Spark's text of the failure holds when ``error`` was raised in the batch: the
    traceback's last line, ``module.Class: first line of the message``."""
    cls = type(error)
    return f"{cls.__module__}.{cls.__qualname__}: {error.message.splitlines()[0] if error.message else ''}"


class _Surfaced:
    """The first base of a surfaced error: the library's message is its text, and it pickles as
    the library's error alone."""

    message: str
    _attrs: dict[str, Any]
    _library_class: type[ExactlyOnceError]

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        plain = self._library_class.__new__(self._library_class)
        ExactlyOnceError.__init__(plain, self.message, **self._attrs)
        return plain.__reduce__()


#: one class per (library error class, Spark exception class), and per query class
_CLASSES: dict[tuple[type, ...], type] = {}


def _surfaced_class(library: type[ExactlyOnceError], spark: type[BaseException]) -> type[BaseException]:
    """``library`` and ``spark`` in one class, named and placed like ``library`` so that a
    traceback's last line reads ``streaming_exactly_once.errors.OffsetGapError: ...``."""
    cls = _CLASSES.get((library, spark))
    if cls is None:
        cls = _CLASSES[library, spark] = type(library.__name__, (_Surfaced, library, spark), {"_library_class": library})
        cls.__module__, cls.__qualname__ = library.__module__, library.__qualname__
    return cls


def surfaced(error: ExactlyOnceError, spark_error: BaseException) -> BaseException:
    """``error`` as an instance of its class and of ``spark_error``'s; Spark's fields (error
    class, JVM stack) are kept, so Spark's methods on it still answer."""
    cls = _surfaced_class(type(error), type(spark_error))
    out = cls.__new__(cls)
    out.__dict__.update(spark_error.__dict__)
    out.__dict__.update(error.__dict__)
    out.args = error.args
    out.__cause__ = error.__cause__
    out.__suppress_context__ = True
    return out.with_traceback(_from_the_library(error.__traceback__))


def _from_the_library(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` from its first frame in the library on: py4j's callback frames say nothing."""
    while tb is not None and not str(tb.tb_frame.f_globals.get("__name__", "")).startswith("streaming_exactly_once."):
        tb = tb.tb_next
    return tb


def library_error(spark_error: BaseException, candidates: list[ExactlyOnceError]) -> ExactlyOnceError | None:
    """The candidate whose signature Spark's text of ``spark_error`` holds."""
    text = str(spark_error)
    return next((c for c in candidates if _signature(c) in text), None)


class _SurfacingQuery:
    """Taken over methods of the ``StreamingQuery`` ``sink.start`` returns (module docstring)."""

    _seo_sink: RefusingSink

    def _seo_surface(self, spark_error: BaseException) -> BaseException | None:
        candidates = [e for e in (self._seo_sink.last_error,) if e is not None]
        try:
            refusal = read_refusal(self._seo_sink.storage)  # Spark Connect: the batch ran in the server
        except Exception:  # noqa: BLE001 - without the record Spark's own error is raised
            refusal = None
        if refusal is not None and refusal.query_id in (None, str(self.id)):  # type: ignore[attr-defined]
            candidates.append(refusal.rebuilt())
        found = library_error(spark_error, candidates)
        return surfaced(found, spark_error) if found is not None else None

    def awaitTermination(self, timeout: int | None = None) -> bool | None:  # noqa: N802 - Spark's name
        try:
            return super().awaitTermination(timeout)  # type: ignore[misc,no-any-return]
        except StreamingQueryException as exc:
            error = self._seo_surface(exc)
            if error is None:
                raise
            raise error from None

    def exception(self) -> StreamingQueryException | None:
        spark_error: StreamingQueryException | None = super().exception()  # type: ignore[misc]
        if spark_error is None:
            return None
        error = self._seo_surface(spark_error)
        return error if isinstance(error, StreamingQueryException) else spark_error


def _query_class(query_class: type) -> type:
    cls = _CLASSES.get((query_class,))
    if cls is None:
        cls = _CLASSES[(query_class,)] = type(query_class.__name__, (_SurfacingQuery, query_class), {"__module__": query_class.__module__})
    return cls


def surfacing(query: StreamingQuery, sink: RefusingSink) -> StreamingQuery:
    """``query`` itself, with ``awaitTermination`` and ``exception`` surfacing the library's
    error of the batch ``sink`` refused."""
    query.__class__ = _query_class(type(query))
    query._seo_sink = sink  # type: ignore[attr-defined]
    return query
