"""Which Iceberg snapshot of a ``format="iceberg"`` table holds exactly manifest batch N.

Each batch is one Iceberg snapshot whose summary carries ``seo.app-id`` and ``seo.batch-id``, so
the two histories line up one to one while the snapshots are retained: an engine reading the
Iceberg table directly (``StaticTable.from_metadata(table).scan(snapshot_id=...)``,
``polars.scan_iceberg(..., snapshot_id=...)``) reads the same rows as the manifest readers when
it is given this snapshot. Snapshot expiry (``iceberg_snapshots_to_keep``) ends that for older
batches; the manifest readers still read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import extras
from ..errors import InvalidAsOfError, TableNotFoundError
from ..manifest.empty_batches import empty_between
from ..table.identity import read_identity
from ..table.table_logs import open_manifest
from .as_of import before_first_file, check_as_of
from .manifest_checks import latest_batch
from .table_location import locate


def iceberg_snapshot(path: str, *, as_of: int | None = None, storage_options: Mapping[str, Any] | None = None) -> int:
    """The id of the Iceberg snapshot of a ``format="iceberg"`` table that holds exactly manifest
    batch ``as_of`` (default: the latest batch) - what an Iceberg reader passes as ``snapshot_id``
    to read the same rows (``InvalidAsOfError`` once expiry removed it)."""
    from ..iceberg.target import IcebergTarget

    as_of = check_as_of(as_of)
    storage = locate(path, storage_options).storage
    identity = read_identity(storage)
    if identity is None or identity.iceberg is None:
        raise TableNotFoundError(f"{storage.root_uri} is not an Iceberg table written by this library (format='iceberg').")
    extras.require("iceberg", what="read.iceberg_snapshot")  # it reads the Iceberg metadata
    manifest = open_manifest(storage, identity)
    latest = latest_batch(storage, identity, manifest)
    batch = latest if as_of is None else as_of
    if batch is None or (latest is not None and batch > latest):
        raise InvalidAsOfError(f"as_of={as_of}: table {storage.root_uri} has no batch {batch}; its latest batch is {latest}.", as_of=as_of)
    target = IcebergTarget(storage, identity.iceberg.app_id, catalog=identity.iceberg.catalog)
    try:
        return target.snapshot_for_batch(batch, skipped=lambda held, upto: empty_between(manifest, held, upto))
    except InvalidAsOfError:
        empty = before_first_file(manifest, identity.first_batch_id, batch, commit="Iceberg snapshot")
        if empty is None:
            raise
        raise empty from None
