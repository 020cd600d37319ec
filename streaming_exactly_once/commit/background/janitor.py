"""Background work of committed batches: removing staging leftovers, applying log retention,
building manifest indexes, preparing the next compact files.

Deleting a staging tree costs about a millisecond on a local disk and much more on an object
store; none of it affects correctness once the batch's WAL entry is gone (recovery removes any
leftover on the next start), so it is done on a daemon thread instead of inside the commit.
``drain`` waits for the queue, so a clean stop leaves the table tidy.

Work runs in lanes, one daemon thread each, in order within a lane. Preparing the next compact
file has a lane of its own (``PREPARE_LANE``): queued behind the index builds (300 ms at
250k live files) it fell so far behind back-to-back batches that the compaction batch found
nothing prepared and copied the whole previous compact file itself. Rewriting small data files
(``commit.rewrites.rewrite_preparation``) has one too: it reads and writes data, and must hold up neither.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from ...storage.base import Storage

log = logging.getLogger("streaming_exactly_once.janitor")

DEFAULT_LANE = "janitor"
PREPARE_LANE = "prepare"
REWRITE_LANE = "rewrite"


class _Lane:
    """One daemon thread and its queue."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.queue: queue.Queue[Callable[[], object]] = queue.Queue()
        self.thread: threading.Thread | None = None


class Janitor:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._lock = threading.Lock()
        self._lanes: dict[str, _Lane] = {}
        self._latest: dict[object, Callable[[], object]] = {}

    def submit(self, task: Callable[[], object], *, lane: str = DEFAULT_LANE) -> None:
        """Run ``task`` later on the thread of ``lane``; its failure is logged, never raised."""
        with self._lock:
            found = self._lanes.get(lane)
            if found is None:
                found = self._lanes[lane] = _Lane(lane)
            if found.thread is None or not found.thread.is_alive():
                name = "seo-janitor" if lane == DEFAULT_LANE else f"seo-{lane}"
                found.thread = threading.Thread(target=self._run, args=(found,), name=name, daemon=True)
                found.thread.start()
        found.queue.put(task)

    def submit_latest(self, key: object, task: Callable[[], object], *, lane: str = DEFAULT_LANE) -> None:
        """Like ``submit``, but tasks of one ``key`` coalesce: if the thread is behind, only the
        newest of them runs (an index of compact 120 makes the one of 110 pointless; one
        preparation pass catches up with every batch). Keeps the queue from growing when
        batches come faster than the background work."""
        with self._lock:
            pending = key in self._latest
            self._latest[key] = task
        if not pending:
            self.submit(lambda: self._run_latest(key), lane=lane)

    def _run_latest(self, key: object) -> None:
        with self._lock:
            task = self._latest.pop(key, None)
        if task is not None:
            task()

    def delete_tree(self, path: str) -> None:
        self.submit(lambda: self.storage.delete_tree(path))

    def _run(self, lane: _Lane) -> None:
        while True:
            task = lane.queue.get()
            try:
                task()
            except BaseException:  # leftovers and caches are harmless; recovery/readers cope
                # BaseException too (a cancelled async client, SystemExit): a dead lane thread
                # would leave its queue unjoinable, and drain - close, open - would hang
                log.warning("background task failed (harmless: recovery and readers cope)", exc_info=True)
            finally:
                lane.queue.task_done()

    def drain(self) -> None:
        """Wait until everything queued so far, in every lane, is done."""
        with self._lock:
            lanes = [lane for lane in self._lanes.values() if lane.thread is not None]
        for lane in lanes:
            lane.queue.join()
