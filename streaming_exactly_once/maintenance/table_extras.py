"""A command that changes or checks a table's Delta or Iceberg side needs that format's extra
(and, for an Iceberg table in a catalog, that catalog's configuration).

``seo verify``, ``recover``, ``gc`` and ``compact`` (and the functions behind them) call
``require_table_extras`` before they take a lease or read anything else, so that a missing
package is one clear refusal naming its ``pip install`` line - not a roll-forward stopped half
way, nor a "table unreadable" finding about a table that is fine. The same holds for an Iceberg
catalog this environment has no configuration of (``CatalogNotConfiguredError``). The commands
that read only this library's own logs (``status``, ``log``, ``files``, ``read``, ``index``)
work without either.
"""

from __future__ import annotations

from .. import extras
from ..storage.base import Storage
from ..table.identity import TableIdentity, read_identity
from .group_tables import group_tables


def _identities(storage: Storage) -> list[tuple[Storage, TableIdentity]]:
    """The table at ``storage``, or every table of a dataset group's root, with its identity."""
    identity = read_identity(storage)
    if identity is None:
        return []
    if identity.kind != "group":
        return [(storage, identity)]
    out = []
    for name in group_tables(storage, identity):
        member = read_identity(storage.child(name))
        if member is not None:
            out.append((storage.child(name), member))
    return out


def table_formats(storage: Storage) -> set[str]:
    """The table formats of the table at ``storage``; of every table of a dataset group's root."""
    return {name for _, identity in _identities(storage) for name in identity.table_formats}


def require_table_extras(storage: Storage) -> None:
    """Raise ``MissingDependencyError`` unless the extras of the table's formats are installed,
    and ``CatalogNotConfiguredError`` unless each Iceberg catalog it uses is configured here."""
    tables = _identities(storage)
    for name in sorted({f for _, identity in tables for f in identity.table_formats}):
        extras.require(name, what=f"{storage.root_uri} (format={name!r})")
    for table, identity in tables:
        ref = identity.iceberg.catalog if identity.iceberg is not None else None
        if ref is not None and ref.name is not None:
            from ..iceberg.catalogs import require_configured

            require_configured(ref.name, {}, table=f"{ref.identifier} of {table.root_uri}")
