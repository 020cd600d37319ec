"""Reading what one Delta commit or snapshot says: our ``txn`` action, times, file paths."""

from __future__ import annotations

import json
from typing import Any


def ms_since_epoch(value: Any) -> int:
    """A modification time as ms since the epoch (delta-rs gives ints or datetimes by version)."""
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1000)
    return int(value or 0)


def txn_version(table: Any, app: str) -> int | None:
    """The version of ``app``'s ``txn`` in a loaded table (None if it has none)."""
    found = table.transaction_version(app)
    return None if found is None else int(found)


def txn_in_commit(data: bytes | None, app: str) -> int | None:
    """The version of ``app``'s ``txn`` action in one commit file's bytes (None if it has none)."""
    for line in (data or b"").splitlines():
        try:
            action = json.loads(line)
        except ValueError:
            return None
        txn = action.get("txn") if isinstance(action, dict) else None
        if isinstance(txn, dict) and txn.get("appId") == app and isinstance(txn.get("version"), int):
            return int(txn["version"])
    return None


def lost_race(exc: BaseException, dl: Any) -> bool:
    """A commit that failed because another one got there first (ours may be that one)."""
    if isinstance(exc, (dl.exceptions.CommitFailedError, FileExistsError)):
        return True
    return "already exists" in str(exc).lower()


def root_spellings(uri: str) -> tuple[str, ...]:
    """The prefixes a file URI of the table at ``uri`` may start with."""
    root = uri.rstrip("/")
    if "://" in root:
        return (root + "/",)
    return (root + "/", "file://" + root + "/")


def relative_to_root(uri: str, roots: tuple[str, ...]) -> str | None:
    """``uri`` relative to the root (``root_spellings``); None if outside it."""
    if "://" not in uri and not uri.startswith("/"):
        return uri
    for root in roots:
        if uri.startswith(root):
            return uri[len(root) :]
    return None
