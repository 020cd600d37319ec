"""A command that changes or checks a table's Delta or Iceberg side needs that format's extra.

``seo verify``, ``recover``, ``gc`` and ``compact`` (and the functions behind them) call
``require_table_extras`` before they take a lease or read anything else, so that a missing
package is one clear refusal naming its ``pip install`` line - not a roll-forward stopped half
way, nor a "table unreadable" finding about a table that is fine. The commands that read only
this library's own logs (``status``, ``log``, ``files``, ``read``, ``index``) work without it.
"""

from __future__ import annotations

from .. import extras
from ..storage.base import Storage
from ..table.identity import read_identity
from .group_tables import group_tables


def table_formats(storage: Storage) -> set[str]:
    """The table formats of the table at ``storage``; of every table of a dataset group's root."""
    identity = read_identity(storage)
    if identity is None:
        return set()
    if identity.kind != "group":
        return set(identity.table_formats)
    formats: set[str] = set()
    for name in group_tables(storage, identity):
        member = read_identity(storage.child(name))
        if member is not None:
            formats.update(member.table_formats)
    return formats


def require_table_extras(storage: Storage) -> None:
    """Raise ``MissingDependencyError`` unless the extras of the table's formats are installed."""
    for name in sorted(table_formats(storage)):
        extras.require(name, what=f"{storage.root_uri} (format={name!r})")
