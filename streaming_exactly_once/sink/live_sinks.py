"""The sinks alive in this process, so that their tables' leases are freed when it ends: at a
clean interpreter exit (the next writer starts at once) and on SIGTERM (Spark Connect ends a
query's worker so). ``batch_sink`` holds the one registry of its sinks; this module knows them
only by what it calls."""

from __future__ import annotations

import atexit
import weakref
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar


class LiveSink(Protocol):
    def close(self) -> None: ...

    def release_lease_now(self) -> None: ...


S = TypeVar("S", bound=LiveSink)


class LiveSinks(Generic[S]):
    """A weak set of sinks whose leases are freed at a clean interpreter exit."""

    def __init__(self) -> None:
        self._sinks: weakref.WeakSet[S] = weakref.WeakSet()
        atexit.register(self.close_all)

    def add(self, sink: S) -> None:
        self._sinks.add(sink)

    def __iter__(self) -> Iterator[S]:
        return iter(list(self._sinks))

    def close_all(self) -> None:
        """A clean interpreter exit frees the tables for the next writer at once."""
        for sink in self:
            try:
                sink.close()
            except Exception:
                pass

    def release_leases_now(self) -> None:
        """On SIGTERM (Spark Connect ends a query's worker so): mark every lease of this process
        released without waiting for the batch the signal interrupted - it will never finish."""
        for sink in self:
            try:
                sink.release_lease_now()
            except Exception:
                pass
