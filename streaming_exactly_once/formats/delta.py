"""Delta Lake behind ``base.TableFormat``: ``delta.target.DeltaTarget`` is the implementation."""

from __future__ import annotations

from ..delta.target import DeltaTarget
from ..errors import DeltaTableError
from ..storage.base import Storage
from ..table.identity import TableIdentity
from .base import TableFormat


def open_table(storage: Storage, identity: TableIdentity) -> TableFormat:
    """The Delta log of a ``format="delta"`` table (its identity holds the app id)."""
    if identity.delta_app_id is None:
        raise DeltaTableError(f"{storage.root_uri} is not a Delta table: its identity names no Delta app id", path=storage.root_uri)
    return DeltaTarget(storage, identity.delta_app_id)
