"""Whether a Delta table takes a batch, checked before the WAL claim: the batch's schema and
partitioning fit the log's (or the evolution the batch asks is one Delta allows), and an append
of our files honours the table's features."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import DeltaSchemaMismatchError
from .engine import deltalake
from .evolve import check_evolution, evolves
from .log_snapshot import LogSnapshot
from .schema import check_appendable, check_fits, check_partition_types


def check_batch_fits(
    table: LogSnapshot | None,
    schema_json: str | None,
    partition_by: Sequence[str],
    *,
    root: str,
    log_uri: str,
    table_schema: str | None = None,
) -> None:
    """Refuse a batch the Delta commit could not take (``DeltaTarget.check_batch``); ``table``
    None: the batch creates the table."""
    if schema_json is None:
        if table is None:
            raise DeltaSchemaMismatchError(
                f"Delta table {root}: the batch came without a schema, and the first batch creates the table with the batch's schema.",
                table=root,
            )
        return
    check_partition_types(schema_json, partition_by, table=root)
    if table is None:
        try:
            deltalake().Schema.from_json(schema_json)
        except Exception as exc:
            raise DeltaSchemaMismatchError(
                f"Delta table {root}: the batch's schema cannot be a Delta schema "
                f"({' '.join(str(exc).split())[:200]}). Cast such columns (e.g. NULL-typed ones) to a real type.",
                table=root,
            ) from None
        return
    check_appendable(table, root)
    metadata = table.metadata()
    current = table.schema().to_json()
    if table_schema is not None and evolves(current, table_schema):
        check_evolution(current, table_schema, table=root, log_uri=log_uri)
        current = table_schema
    check_fits(current, metadata.partition_columns, schema_json, partition_by, table=root, log_uri=log_uri)
