"""Where the slowest commits' time goes, batch by batch.

A p99 over a few hundred batches is set by a handful of them, which a sampling profile cannot
single out. ``CommitAnatomy`` records, for each timed commit: its phases (the committer's own
``CommitResult.timings``), the CPU time of the committing thread and of the process's other
threads (the I/O threads that fsync and checksum, the background preparation), and the fsyncs
(count, summed time, the longest; ``os.fsync`` is timed while the anatomy is open, from any
thread). ``summary`` keeps the medians and the slowest batches with their breakdown
(``bench_targets`` stores it in ``targets.json``).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any


class CommitAnatomy:
    """``with CommitAnatomy() as anatomy``: ``start()`` before a commit, ``stop(...)`` after it."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._fsyncs: list[float] = []
        self._lock = threading.Lock()
        self._real_fsync: Callable[[int], None] | None = None
        self._t0 = self._thread0 = self._process0 = 0.0

    def __enter__(self) -> CommitAnatomy:
        real = self._real_fsync = os.fsync

        def timed(fd: int) -> None:
            t0 = time.perf_counter()
            try:
                real(fd)
            finally:
                with self._lock:
                    self._fsyncs.append((time.perf_counter() - t0) * 1000)

        os.fsync = timed
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._real_fsync is not None:
            os.fsync = self._real_fsync

    def start(self) -> None:
        with self._lock:
            self._fsyncs.clear()
        self._thread0, self._process0 = time.thread_time(), time.process_time()
        self._t0 = time.perf_counter()

    def stop(self, batch_id: int, *, compaction: bool, timings: dict[str, float]) -> None:
        wall = (time.perf_counter() - self._t0) * 1000
        thread = (time.thread_time() - self._thread0) * 1000
        process = (time.process_time() - self._process0) * 1000
        with self._lock:
            fsyncs = list(self._fsyncs)
        self.rows.append(
            {
                "batch": batch_id,
                "ms": round(wall, 2),
                "compaction": compaction,
                "thread_cpu_ms": round(thread, 2),
                "other_threads_cpu_ms": round(max(0.0, process - thread), 2),
                "fsyncs": len(fsyncs),
                "fsync_ms": round(sum(fsyncs), 2),
                "longest_fsync_ms": round(max(fsyncs, default=0.0), 2),
                "phases": {k: round(v, 2) for k, v in timings.items()},
            }
        )

    def summary(self, share: float = 0.01) -> dict[str, Any]:
        """Medians over every batch and over the compaction batches, and the slowest ``share``
        of the batches (at least five) with their breakdown."""
        rows = self.rows
        if not rows:
            return {}
        slowest = sorted(rows, key=lambda r: -r["ms"])[: max(5, int(len(rows) * share))]
        fsync_median = _median(rows, "fsync_ms")
        return {
            "batches": len(rows),
            "median": _medians(rows),
            "compaction_median": _medians([r for r in rows if r["compaction"]]),
            "slowest": slowest,
            "slowest_compaction_batches": sum(r["compaction"] for r in slowest),
            "slowest_with_fsyncs_over_twice_the_median": sum(r["fsync_ms"] > 2 * fsync_median for r in slowest),
            "longest_fsync_ms": max(r["longest_fsync_ms"] for r in rows),
        }


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(r[key] for r in rows), 2) if rows else 0.0


def _medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {}
    keys = ("ms", "thread_cpu_ms", "other_threads_cpu_ms", "fsyncs", "fsync_ms", "longest_fsync_ms")
    phases = sorted({k for r in rows for k in r["phases"]})
    return {
        **{k: _median(rows, k) for k in keys},
        "phases": {k: round(statistics.median(r["phases"].get(k, 0.0) for r in rows), 2) for k in phases},
    }
