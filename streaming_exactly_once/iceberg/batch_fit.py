"""Whether an Iceberg table takes a batch, checked before the WAL claim: the batch's schema and
partitioning fit the table, and an append of our files would not break it."""

from __future__ import annotations

from collections.abc import Sequence

from pyiceberg.table import Table

from ..errors import IcebergSchemaMismatchError
from ..storage.base import Storage
from .evolve import added_columns, batch_view
from .schema import STREAM_ADVICE, check_appendable, check_fits, check_partition_types, iceberg_schema


def check_batch_fits(
    table: Table | None,
    schema_json: str | None,
    partition_by: Sequence[str],
    *,
    storage: Storage,
    name: str,
    table_schema: str | None = None,
    advice: str | None = None,
) -> None:
    """Refuse a batch the Iceberg commit could not take (``IcebergTarget.check_batch``); ``table``
    None: the batch creates the table."""
    if schema_json is None:
        if table is None:
            raise IcebergSchemaMismatchError(
                f"Iceberg table {name}: the batch came without a schema, and the first batch creates the table with the batch's schema.",
                table=storage.root_uri,
            )
        # a batch of no rows (``seo compact``'s): the table must take its commit all the same,
        # checked against the table's own columns (a foreign writer may have changed its spec)
        check_appendable(table.metadata, storage, name=name)
        check_fits(
            table.metadata,
            table.schema(),
            partition_by,
            table=name,
            metadata_file=table.metadata_location,
            advice=advice
            or "Another writer changed the table's partition spec or columns since this library's last batch: restore "
            "them as this table's identity records them (_seo/table), or write to a new table.",
        )
        return
    check_partition_types(schema_json, partition_by, table=name)
    batch = iceberg_schema(schema_json, table=name)
    if table is None:
        return
    check_appendable(table.metadata, storage, name=name)
    if table_schema is not None:
        batch = batch_view(batch, added_columns(table.schema(), table_schema, table=name))
    check_fits(table.metadata, batch, partition_by, table=name, metadata_file=table.metadata_location, advice=advice or STREAM_ADVICE)
