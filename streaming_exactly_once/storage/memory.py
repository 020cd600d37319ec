"""In-process storage for fast unit tests (``memory://name``), with a real exclusive create.

fsspec's ``MemoryFileSystem`` checks for existence when a file is opened and stores it when
it is closed, so two threads can both create the same path. One process-wide lock around
check-and-store makes ``put_if_absent`` and ``rename`` exclusive. The data lives in this
process only: it is not visible to Spark executors or other processes.
"""

from __future__ import annotations

import errno
import threading
from typing import Any
from urllib.parse import urlsplit

from .fsspec_store import FsspecStorage, parent_of

_LOCK = threading.RLock()


class MemoryStorage(FsspecStorage):
    """Storage in fsspec's process-global memory filesystem."""

    rename_is_atomic = True  # under the process-wide lock

    def __init__(self, root_uri: str, options: dict[str, Any] | None = None) -> None:
        parts = urlsplit(root_uri)
        native = "/" + (parts.netloc + parts.path).strip("/")
        super().__init__("memory://" + native.lstrip("/"), native, options)

    def put_if_absent(self, path: str, data: bytes) -> None:
        native = self._native(path)
        with _LOCK:
            if self._fs.exists(native):
                raise FileExistsError(errno.EEXIST, "file exists", self.uri(path))
            self._fs.pipe_file(native, bytes(data))

    def atomic_write(self, path: str, data: bytes) -> None:
        with _LOCK:
            self._fs.pipe_file(self._native(path), bytes(data))

    def rename(self, src: str, dst: str) -> None:
        s, d = self._native(src), self._native(dst)
        with _LOCK:
            if self._fs.exists(d):
                raise FileExistsError(errno.EEXIST, "rename target exists", self.uri(dst))
            if not self._fs.exists(s):
                raise FileNotFoundError(errno.ENOENT, "rename source missing", self.uri(src))
            self._fs.makedirs(parent_of(d), exist_ok=True)
            self._fs.mv(s, d)

    def makedirs(self, path: str) -> None:
        self._fs.makedirs(self._native(path), exist_ok=True)
