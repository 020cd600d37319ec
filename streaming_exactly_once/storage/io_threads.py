"""Threads that wait on storage, kept for the life of their owner.

The commit path overlaps calls that only wait on the disk or the network (an ``fsync`` per
moved file, the bookkeeping records of a batch). Starting a ``ThreadPoolExecutor`` for each
batch costs about 0.6 ms on a 2-core machine - a tenth of a whole commit - so pools are kept:

* ``io_pool(name)``: one per process and name. Local disk keys its pools by device
  (``fsync-<st_dev>``): a disk that hangs holds up only work that waits on that same disk.
* ``OwnedPool``: one per owner (a committer), so one table's hung store never holds up another
  table's commit in the same driver.

A pool is remade in a process forked after it was made (Spark's Python workers are forked): a
forked child inherits the pool object but none of its threads, and work submitted to it would
never run. Work submitted while the interpreter shuts down (a commit from a non-daemon thread
after the main thread returned) runs on the calling thread instead (``submit_or_run``).

Each name is its own pool so that work in one pool may wait on another (a bookkeeping step whose
storage call syncs files) without ever waiting on a thread of its own pool.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_lock = threading.Lock()
_pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}


def _forget_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    _pools.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def io_pool(name: str, max_workers: int) -> ThreadPoolExecutor:
    """The process's pool called ``name`` (threads ``seo-<name>_N``), made on first use."""
    pid = os.getpid()
    with _lock:
        held = _pools.get(name)
        if held is None or held[0] != pid:
            held = _pools[name] = (pid, ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=f"seo-{name}"))
        return held[1]


class OwnedPool:
    """A pool that belongs to one object: made on first use, remade after a fork, closed with it."""

    def __init__(self, name: str, max_workers: int) -> None:
        self.name = name
        self.max_workers = max_workers
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def get(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix=f"seo-{self.name}")
                self._pid = os.getpid()
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.shutdown(wait=True)

    def __getstate__(self) -> dict[str, Any]:  # a pool never travels: the copy makes its own
        return {"name": self.name, "max_workers": self.max_workers}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["name"], state["max_workers"])  # type: ignore[misc]


def submit_or_run(pool: ThreadPoolExecutor, fn: Callable[..., R], *args: Any, **kwargs: Any) -> Future[R]:
    """``pool.submit``; where the pool takes no more work (the interpreter is shutting down),
    ``fn`` runs here and the returned future is already done."""
    try:
        return pool.submit(fn, *args, **kwargs)
    except RuntimeError:
        done: Future[R] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed over through the future, as a pool thread would
            done.set_exception(exc)
        return done


def map_waiting(pool_name: str, fn: Callable[[T], R], items: Iterable[T], *, max_workers: int = 8) -> list[R]:
    """``[fn(x) for x in items]``, overlapped on pool ``pool_name`` from three items on (each
    call waits on storage, not on the CPU); the first error is raised once all have ended."""
    todo = list(items)
    if len(todo) < 3:
        return [fn(x) for x in todo]
    pool = io_pool(pool_name, max_workers)
    futures = [submit_or_run(pool, fn, x) for x in todo]
    errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error
    return [f.result() for f in futures]
