"""Apache Iceberg behind ``base.TableFormat``: ``iceberg.target.IcebergTarget`` is the implementation."""

from __future__ import annotations

from ..errors import IcebergTableError
from ..iceberg.target import IcebergTarget
from ..storage.base import Storage
from ..table.identity import TableIdentity
from .base import TableFormat


def open_table(storage: Storage, identity: TableIdentity) -> TableFormat:
    """The Iceberg table of a ``format="iceberg"`` table, by path or in the catalog its identity names."""
    if identity.iceberg is None:
        raise IcebergTableError(f"{storage.root_uri} is not an Iceberg table: its identity names no Iceberg table", table=storage.root_uri)
    return IcebergTarget(storage, identity.iceberg.app_id, catalog=identity.iceberg.catalog)
