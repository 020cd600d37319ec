"""A storage wrapper (the sink's ``storage_wrapper`` option) that holds the third batch of a
stream inside its commit, right after its WAL claim, until the test lets it go."""

from __future__ import annotations

import threading

from streaming_exactly_once.storage.base import Storage
from streaming_exactly_once.testing.faults import FaultInjectingStorage, call_at

STALLED = threading.Event()  # set by the batch when it starts waiting
RELEASE = threading.Event()  # set by the test


def _hold() -> None:
    STALLED.set()
    RELEASE.wait(timeout=120)


def wrap(storage: Storage) -> Storage:
    return FaultInjectingStorage(storage, [call_at("after-wal@3", _hold)])
