"""Storage over an fsspec filesystem: the only module of the library that imports fsspec.

Generic operations (read, list, delete) go straight to fsspec. The two operations whose
exclusivity fsspec does not promise in general - ``put_if_absent`` and ``rename`` - are left to
the backend subclasses (``memory.py``, ``s3.py``, ``azure.py``, ``gcs.py``), which know which
primitive is really atomic on their service. Listing caches are always off: a log that trusts a
stale listing would miss a batch written by the writer it is about to fence.

Every call goes through ``_errors(path)``, where a backend turns the SDK's failure for a
rejected credential or a missing container into one ``StorageAccessError`` naming the URI
(``_access_error``); ``FileExistsError``/``FileNotFoundError`` keep their meaning otherwise.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Iterator
from datetime import datetime
from typing import IO, Any

import fsspec

from .. import extras
from ..errors import StorageAccessError
from .base import FileInfo, Storage, check_relative, join

#: URI scheme -> fsspec protocol, where they differ
PROTOCOLS = {"s3a": "s3", "s3n": "s3"}


def make_filesystem(scheme: str, options: dict[str, Any]) -> Any:
    """An fsspec filesystem for ``scheme`` with listing caches off."""
    extras.require_storage(f"{scheme}://")
    protocol = PROTOCOLS.get(scheme, scheme)
    kwargs = dict(options)
    if protocol not in ("file", "memory"):
        kwargs.setdefault("use_listings_cache", False)
    return fsspec.filesystem(protocol, **kwargs)


def _mtime_ms(info: dict[str, Any]) -> int:
    for key in ("LastModified", "mtime", "created", "last_modified", "updated"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return int(value.timestamp() * 1000)
        if isinstance(value, (int, float)):
            return int(value * 1000) if value < 1e11 else int(value)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    return 0


class FsspecStorage(Storage):
    """Shared fsspec plumbing; subclasses provide the exclusive primitives."""

    rename_is_atomic = False

    def __init__(self, root_uri: str, native_root: str, options: dict[str, Any] | None = None) -> None:
        self.root_uri = root_uri.rstrip("/")
        self._native_root = native_root.rstrip("/")
        self._options = dict(options or {})
        self._fs = self._make_filesystem()

    def _make_filesystem(self) -> Any:
        return make_filesystem(self.scheme, self._options)

    # -- errors ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(self, path: str) -> Iterator[None]:
        """Re-raise a backend's access failure as ``StorageAccessError`` naming ``path``'s URI."""
        try:
            yield
        except FileExistsError:
            raise
        except Exception as exc:
            mapped = self._access_error(exc, path)
            if mapped is None:
                raise
            raise mapped from exc

    def _access_error(self, exc: BaseException, path: str) -> StorageAccessError | None:
        """The ``StorageAccessError`` that ``exc`` means, or None to let it through unchanged."""
        return None

    # -- helpers -----------------------------------------------------------------------------

    def _native(self, path: str) -> str:
        path = check_relative(path)
        return f"{self._native_root}/{path}" if path else self._native_root

    def _rel(self, native: str) -> str:
        native = native.rstrip("/")
        prefix = self._native_root + "/"
        if native.startswith(prefix):
            return native[len(prefix) :]
        if native == self._native_root:
            return ""
        # some backends drop a leading slash (memory://): compare without it
        alt = self._native_root.lstrip("/") + "/"
        if native.lstrip("/").startswith(alt):
            return native.lstrip("/")[len(alt) :]
        return native

    def _to_info(self, entry: dict[str, Any]) -> FileInfo:
        return FileInfo(
            self._rel(entry["name"]),
            int(entry.get("size") or 0),
            _mtime_ms(entry),
            entry.get("type") == "directory",
            change=str(entry.get("ETag") or entry.get("etag") or ""),
        )

    # -- Storage -----------------------------------------------------------------------------

    def child(self, path: str) -> FsspecStorage:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        rel = check_relative(path)
        clone.root_uri = f"{self.root_uri}/{rel}" if rel else self.root_uri
        clone._native_root = self._native(rel)
        return clone

    def read_bytes(self, path: str) -> bytes:
        with self._errors(path):
            data: bytes = self._fs.cat_file(self._native(path))
            return data

    def read_head(self, path: str, n: int) -> bytes:
        with self._errors(path):
            size = self._fs.info(self._native(path))["size"]
            if n <= 0 or size == 0:  # no bytes to ask for: an empty range is sent as none (the whole
                return b""  # object) by s3fs, and a range of an empty object is refused (416)
            head: bytes = self._fs.cat_file(self._native(path), start=0, end=min(n, size))
            return head

    def read_tail(self, path: str, n: int) -> bytes:
        with self._errors(path):
            size = self._fs.info(self._native(path))["size"]
            if n <= 0 or size == 0:  # no bytes to ask for (see read_head)
                return b""
            tail: bytes = self._fs.cat_file(self._native(path), start=max(0, size - n), end=size)
            return tail

    def info(self, path: str) -> FileInfo:
        with self._errors(path):
            return self._to_info(self._fs.info(self._native(path)))

    def list_dir(self, path: str = "") -> list[FileInfo]:
        try:
            with self._errors(path):
                entries = self._fs.ls(self._native(path), detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        native = self._native(path).rstrip("/")
        return [self._to_info(e) for e in entries if e["name"].rstrip("/") != native]

    def walk_files(self, path: str = "") -> Iterator[FileInfo]:
        try:
            with self._errors(path):
                found = self._fs.find(self._native(path), detail=True)
        except FileNotFoundError:
            return
        for entry in found.values():
            if entry.get("type") != "directory":
                yield self._to_info(entry)

    def atomic_write(self, path: str, data: bytes) -> None:
        with self._errors(path):
            self._fs.pipe_file(self._native(path), data)

    def open_write(self, path: str) -> IO[bytes]:
        native = self._native(path)
        if self.exists(path):
            raise FileExistsError(self.uri(path))
        with self._errors(path):
            writer: IO[bytes] = self._fs.open(native, "wb")
            return writer

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        if not missing_ok and not self.exists(path):
            raise FileNotFoundError(self.uri(path))  # object stores delete missing keys silently
        try:
            with self._errors(path):
                self._fs.rm_file(self._native(path))
        except FileNotFoundError:
            if not missing_ok:
                raise

    def delete_tree(self, path: str) -> None:
        if check_relative(path) == "":
            raise ValueError("refusing to delete a storage root")
        with contextlib.suppress(FileNotFoundError), self._errors(path):
            self._fs.rm(self._native(path), recursive=True)

    def filesystem(self) -> tuple[Any, str]:
        return self._fs, self._native_root

    def options(self) -> dict[str, Any]:
        return dict(self._options)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_fs", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._fs = self._make_filesystem()


def error_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and its causes: SDKs and fsspec wrap the service's answer in other exceptions."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def parent_of(native: str) -> str:
    return posixpath.dirname(native.rstrip("/"))


__all__ = ["FsspecStorage", "error_chain", "make_filesystem", "parent_of", "join"]
