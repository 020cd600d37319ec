"""One probe per remote store and process: does create-if-absent really refuse a second create?

Exclusivity on an object store is the service's promise, not this library's: an S3-compatible
server that ignores ``If-None-Match: *`` or a GCS emulator that ignores ``ifGenerationMatch=0``
lets every create succeed, and nothing in the answers shows it. Before a writer takes a lease,
the backend creates one object under a directory the caller owns twice; the second create must
fail. The answer is cached per store key (endpoint and bucket), because it cannot change while
the process runs and a probe costs requests.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Hashable

from .base import Storage, join

_PROBED: dict[Hashable, str | None] = {}
_LOCK = threading.Lock()


def exclusive_create_problem(storage: Storage, key: Hashable, probe_dir: str) -> str | None:
    """None if ``storage.put_if_absent`` refused a second create (cached per ``key``), else why not."""
    with _LOCK:  # one probe per key, even when many tables open at once
        if key not in _PROBED:
            _PROBED[key] = _probe(storage, join(probe_dir, uuid.uuid4().hex))
        return _PROBED[key]


def _probe(storage: Storage, path: str) -> str | None:
    storage.put_if_absent(path, b"first")
    try:
        storage.put_if_absent(path, b"second")
    except FileExistsError:
        return None
    finally:
        storage.delete(path)
    return f"a second create-if-absent of {storage.uri(path)} succeeded instead of being refused."
