"""What a local disk's refusals mean for a table: ``StorageAccessError`` instead of a bare ``OSError``.

A read-only mount (``EROFS``), missing permissions (``EACCES``, ``EPERM``) or a path through a
file (``ENOTDIR``: the table path is a file) are not bugs and not transient: a person must
change the mount, the permissions or the path. The OS's own error names a temp file deep
under ``_seo``; the one a user sees names the table, the cause and what to do, and is a
``TerminalError``, so the commit engine does not retry it. Anything else (``FileExistsError``,
``FileNotFoundError``, ``ENOSPC``, ...) goes through unchanged: callers rely on the first two,
and the rest keep their own meaning.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ..errors import StorageAccessError
from .base import Storage

#: errno -> (reason, what the OS said, in the user's words)
_CAUSES = {
    errno.EROFS: ("read-only", "read-only file system"),
    errno.EACCES: ("permission", "permission denied"),
    errno.EPERM: ("permission", "operation not permitted"),
    errno.ENOTDIR: ("not-a-directory", "not a directory"),
}

_HINTS = {
    ("read-only", "write"): (
        "Mount it read-write to run this; what only reads works on a read-only table "
        "(the readers, seo status, seo verify, seo gc --dry-run, seo compact --dry-run)"
    ),
    ("permission", "write"): "Give this user write access to the table's directory and everything under it, or run as the user that writes the table",
    ("permission", "read"): "Give this user read access to the table's directory and everything under it",
    ("not-a-directory", "write"): "A table is a directory: give the path of a directory (a new or empty one, or an existing table's), not of a file",
    ("not-a-directory", "read"): "A table is a directory: give the path of the table's directory, not of a file in it",
}


class _Rooted(Protocol):
    root_uri: str
    _root: str

    def uri(self, path: str = "") -> str: ...


def access_error(storage: _Rooted, exc: OSError, path: str, action: str) -> StorageAccessError | None:
    """The ``StorageAccessError`` that ``exc`` (raised for ``path`` while doing ``action``,
    ``read`` or ``write``) means, or None to let it through unchanged."""
    if isinstance(exc, StorageAccessError) or exc.errno not in _CAUSES:
        return None
    reason, detail = _CAUSES[exc.errno]
    uri = storage.uri(path)
    if reason == "not-a-directory":
        file_uri = _file_on_the_way(storage, path)
        if file_uri is not None:
            uri, detail = file_uri, "it is a file, not a directory" if file_uri == storage.root_uri else f"{file_uri} is a file, not a directory"
    hint = _HINTS.get((reason, action)) or _HINTS[(reason, "write")]
    words = "write to" if action == "write" else action
    return StorageAccessError(uri=uri, reason=reason, detail=detail, hint=hint, table=storage.root_uri, action=words)


def _file_on_the_way(storage: _Rooted, path: str) -> str | None:
    """The URI of the file that ``ENOTDIR`` met: the nearest existing one of ``path``'s parents
    (the root, or one above it, included)."""
    probe = os.path.dirname(os.path.join(storage._root, path) if path else storage._root)
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return None
        probe = parent
    if not probe or os.path.isdir(probe):
        return None
    return "file://" + probe


F = TypeVar("F", bound=Callable[..., Any])


def mapped(action: str) -> Callable[[F], F]:
    """A ``LocalStorage`` method whose first argument is a path: its refusals as ``access_error``."""

    def decorate(method: F) -> F:
        @functools.wraps(method)
        def wrapper(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, path, *args, **kwargs)
            except OSError as exc:
                error = access_error(self, exc, path, action)
                if error is None:
                    raise
                raise error from exc

        return wrapper  # type: ignore[return-value]

    return decorate


def file_root_error(storage: Storage) -> StorageAccessError:
    """The table path names a file: what a writer of the table is told before it writes anything."""
    return StorageAccessError(
        uri=storage.root_uri,
        reason="not-a-directory",
        detail="it is a file, not a directory",
        hint=_HINTS[("not-a-directory", "write")],
        table=storage.root_uri,
        action="write to",
    )
