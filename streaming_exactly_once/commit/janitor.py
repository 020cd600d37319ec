"""Background work of committed batches: removing staging leftovers, building manifest indexes.

Deleting a staging tree costs about a millisecond on a local disk and much more on an object
store; none of it affects correctness once the batch's WAL entry is gone (recovery removes any
leftover on the next start), so it is done on a daemon thread instead of inside the commit.
``drain`` waits for the queue, so a clean stop leaves the table tidy.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from ..storage.base import Storage

log = logging.getLogger("streaming_exactly_once.janitor")


class Janitor:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._queue: queue.Queue[Callable[[], object]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._latest: dict[object, Callable[[], object]] = {}

    def submit(self, task: Callable[[], object]) -> None:
        """Run ``task`` later on the janitor thread; its failure is logged, never raised."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="seo-janitor", daemon=True)
                self._thread.start()
        self._queue.put(task)

    def submit_latest(self, key: object, task: Callable[[], object]) -> None:
        """Like ``submit``, but tasks of one ``key`` coalesce: if the thread is behind, only the
        newest of them runs (an index of compact 120 makes the one of 110 pointless; one
        preparation pass catches up with every batch). Keeps the queue from growing when
        batches come faster than the background work."""
        with self._lock:
            pending = key in self._latest
            self._latest[key] = task
        if not pending:
            self.submit(lambda: self._run_latest(key))

    def _run_latest(self, key: object) -> None:
        with self._lock:
            task = self._latest.pop(key, None)
        if task is not None:
            task()

    def delete_tree(self, path: str) -> None:
        self.submit(lambda: self.storage.delete_tree(path))

    def _run(self) -> None:
        while True:
            task = self._queue.get()
            try:
                task()
            except Exception:  # leftovers and caches are harmless; recovery/readers cope
                log.warning("background task failed (harmless: recovery and readers cope)", exc_info=True)
            finally:
                self._queue.task_done()

    def drain(self) -> None:
        """Wait until everything queued so far is deleted."""
        if self._thread is not None:
            self._queue.join()
