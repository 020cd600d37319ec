"""The sinks alive in this process, so that their tables' leases are freed when it ends: at a
clean interpreter exit (the next writer starts at once) and on SIGTERM (Spark Connect ends a
query's worker so)."""

from __future__ import annotations

import atexit
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .batch_sink import BatchSink

LIVE_SINKS: weakref.WeakSet[BatchSink[Any]] = weakref.WeakSet()


@atexit.register
def _release_leases() -> None:  # a clean interpreter exit frees the table for the next writer at once
    for sink in list(LIVE_SINKS):
        try:
            sink.close()
        except Exception:
            pass


def release_leases_now() -> None:
    """On SIGTERM (Spark Connect ends a query's worker so): mark every lease of this process
    released without waiting for the batch the signal interrupted - it will never finish."""
    for sink in list(LIVE_SINKS):
        committer = sink._committer
        if committer is not None:
            try:
                committer.lease.release()
            except Exception:
                pass
