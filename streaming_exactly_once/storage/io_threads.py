"""Threads that wait on storage, kept for the life of the process.

The commit path overlaps calls that only wait on the disk or the network (an ``fsync`` per
moved file, the bookkeeping records of a batch). Starting a ``ThreadPoolExecutor`` for each
batch costs about 0.6 ms on a 2-core machine - a tenth of a whole commit - so each kind of
work gets one pool per process, created on first use.

A pool is recreated in a process forked after it was made (Spark's Python workers are forked):
a forked child inherits the pool object but none of its threads, and work submitted to it
would never run.

Each name is its own pool so that work in one pool may wait on another (a bookkeeping step
whose storage call syncs files) without ever waiting on a thread of its own pool.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_lock = threading.Lock()
_pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}


def io_pool(name: str, max_workers: int) -> ThreadPoolExecutor:
    """The process's pool called ``name`` (threads ``seo-<name>_N``), made on first use."""
    pid = os.getpid()
    with _lock:
        held = _pools.get(name)
        if held is None or held[0] != pid:
            held = _pools[name] = (pid, ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=f"seo-{name}"))
        return held[1]
