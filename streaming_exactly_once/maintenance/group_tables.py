"""The tables of a dataset group, and the group a table belongs to.

A group's newest commit record holds the state of every table (``table.group_state``):
datasets with a published batch, and quarantine tables. That record - not a directory listing -
says which directories under the root are the group's tables and at which batch each one is;
nothing else under the root belongs to them. A member table has no lease or WAL of its own:
its ``_seo/table`` says how far up its group root is (``"group":"../.."``), and the group
root's lease and WAL are the ones that cover it.
"""

from __future__ import annotations

from typing import Any

from ..errors import IdentityError, LogCorruptError
from ..storage import open_storage
from ..storage.base import Storage
from ..table.commits_log import CommitRecord, CommitsLog
from ..table.group_state import split_state
from ..table.identity import TableIdentity, read_identity
from ..table.layout import COMMITS_DIR
from ..table.table_logs import TableLogs


def newest_group_record(storage: Storage, identity: TableIdentity | None) -> CommitRecord | None:
    """The newest commit record of the group at ``storage`` (None before its first batch)."""
    logs = TableLogs.for_identity(storage, identity)
    per_query = logs.commits.latest_per_query()
    return max(per_query.values(), key=lambda r: r.batch_id, default=None)


def group_tables(storage: Storage, identity: TableIdentity | None = None) -> dict[str, int]:
    """Path under the group root -> the table's latest batch, for every table of the group."""
    identity = identity if identity is not None else read_identity(storage)
    return tables_of_record(storage, newest_group_record(storage, identity))


def group_tables_at(storage: Storage, commits: CommitsLog, batch_id: int | None) -> dict[str, int]:
    """``group_tables`` from the record of group batch ``batch_id``, known to be the newest: one
    read of its file (``commits`` knowing its interval) instead of a listing of the commits log,
    which grows with the history."""
    if batch_id is None:
        return {}
    records = commits.get(batch_id) or []
    return tables_of_record(storage, max((r for r in records if r.batch_id == batch_id), key=lambda r: r.batch_id, default=None))


def tables_of_record(storage: Storage, newest: CommitRecord | None) -> dict[str, int]:
    """The tables the group's newest commit record names, with their latest batches."""
    state: Any = (newest.datasets or {}) if newest is not None else {}
    where = storage.uri(COMMITS_DIR)
    batch = newest.batch_id if newest is not None else None

    def corrupt(what: str) -> LogCorruptError:
        return LogCorruptError(
            path=where,
            batch_id=batch,
            problem=f"the group state of the newest commit record {what}",
            hint="Restore the commits log from a backup; `seo verify` on the group shows what is affected.",
        )

    try:
        datasets, quarantine = split_state(state)
        tables = {name: e.get("batchId") for name, e in datasets.items() if isinstance(e, dict) and "batchId" in e}
        tables.update(quarantine)
    except (TypeError, ValueError, AttributeError):
        raise corrupt("is not a map of tables") from None
    checked: dict[str, int] = {}
    for name, batch_id in tables.items():
        parts = name.split("/") if isinstance(name, str) else [""]
        if "" in parts or ".." in parts or not isinstance(batch_id, int) or isinstance(batch_id, bool):
            raise corrupt(f"names table {name!r} at batch {batch_id!r}, which is no table path and batch id")
        checked[name] = batch_id
    return checked


def group_of(storage: Storage, identity: TableIdentity) -> tuple[Storage, str]:
    """For a table of a dataset group: the group root's storage and the table's path under it."""
    ups = (identity.group or "").split("/")
    parts = storage.root_uri.rstrip("/").split("/")
    if not ups or any(p != ".." for p in ups) or len(parts) - len(ups) < 3:
        raise IdentityError(
            f"{storage.uri('_seo/table')} says the table belongs to the group at {identity.group!r}, which is no "
            "path up to a parent directory. Restore the file from a backup.",
            table=storage.root_uri,
        )
    root = open_storage("/".join(parts[: -len(ups)]), storage.options())
    root_identity = read_identity(root)
    if root_identity is None or root_identity.kind != "group":
        raise IdentityError(
            f"{storage.root_uri} is a table of the dataset group at {root.root_uri}, but that directory holds no "
            "group (its _seo/table is missing or not a group's). The group's lease and WAL cover its tables, so "
            "nothing can be done to this table safely: restore the group root's _seo/ from a backup.",
            table=storage.root_uri,
        )
    return root, "/".join(parts[-len(ups) :])
