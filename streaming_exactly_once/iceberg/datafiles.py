"""A batch's files as pyiceberg ``DataFile``s: location, size, row count and partition values.

Built from what the commit step knows (``files.IcebergFile``) instead of pyiceberg's
``add_files``, which opens each file again and derives partition values from column
statistics - Spark's files hold no partition columns (those live in the directory names), and
their values would be guessed from bounds this layer deliberately does not record.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import EMPTY_DICT, Record
from pyiceberg.types import BooleanType, DateType, IcebergType, IntegerType, LongType, StringType

from ..errors import IcebergTableError
from .files import IcebergFile, partition_values

log = logging.getLogger("streaming_exactly_once.iceberg")

_EPOCH = datetime.date(1970, 1, 1)


def _value(text: str | None, type_: IcebergType, *, column: str, path: str, table: str) -> object:
    if text is None:
        return None
    try:
        if isinstance(type_, StringType):
            return text
        if isinstance(type_, (IntegerType, LongType)):
            return int(text)
        if isinstance(type_, BooleanType):
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if isinstance(type_, DateType):
            return (datetime.date.fromisoformat(text) - _EPOCH).days
    except ValueError:
        pass
    raise IcebergTableError(
        f"Data file {table}/{path}: partition directory {column}={text} is not a {type_} value, the type of "
        f"{column!r} in the Iceberg table: another writer changed the column's type after the file's batch was "
        "checked. The batch is published in the table's manifest already, so it cannot be discarded: restore the "
        "column's type, then restart the query or run `seo recover <table>`.",
        table=table,
        path=path,
        column=column,
    )


def data_files(metadata: TableMetadata, location: str, files: Sequence[IcebergFile], *, table: str) -> list[DataFile]:
    """``DataFile``s for ``files`` in the table's current partition spec (identity transforms only,
    checked before: ``schema.schema_differences``)."""
    schema = metadata.schema()
    spec = metadata.spec()
    columns = [schema.find_field(f.source_id) for f in spec.fields]
    out = []
    for f in files:
        if f.rows is None:
            raise ValueError(f"{f.path}: the row count is read from the footer before the commit")
        values = partition_values(f.path, [c.name for c in columns], table=table) if columns else {}
        partition = Record(*[_value(values[c.name], c.field_type, column=c.name, path=f.path, table=table) for c in columns])
        out.append(
            DataFile.from_args(
                _table_format_version=metadata.format_version,
                content=DataFileContent.DATA,
                file_path=f"{location}/{f.path}",
                file_format=FileFormat.PARQUET,
                partition=partition,
                record_count=f.rows,
                file_size_in_bytes=f.size,
                sort_order_id=None,
                spec_id=metadata.default_spec_id,
                equality_ids=None,
                key_metadata=None,
            )
        )
    return out


class _ReplaceFiles(_OverwriteFiles):
    """pyiceberg 0.12's overwrite producer, writing a ``replace`` snapshot: the same manifests
    (removed files as DELETED entries, the new one ADDED); its summary is computed as for an
    overwrite (pyiceberg's running totals know no ``replace``) and then named ``replace``."""

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        summary = super()._summary(snapshot_properties)
        properties = summary.model_dump()  # {"operation": ..., every other property}
        properties.pop("operation", None)
        return Summary(Operation.REPLACE, **properties)


def add_replace_snapshot(
    txn: Any,
    rewrites: Sequence[tuple[Sequence[IcebergFile], IcebergFile]],
    *,
    location: str,
    table: str,
    summary: dict[str, str],
    commit_uuid: Any,
) -> None:
    """A compaction's ``rewrites`` (the files each replaces, its new file) as a ``replace``
    snapshot in ``txn``, after the batch's append. Iceberg's streaming readers skip a ``replace``
    snapshot (no data changed), as Delta's skip ``dataChange: false``.

    A rewrite one of whose files the table no longer holds (another writer of the Iceberg table
    removed it) is left out, with a warning: the table keeps its files as that writer left them,
    and the commit - rolled forward by every retry - never fails over it."""
    from .history import snapshot_data_files

    metadata = txn.table_metadata
    parent = metadata.current_snapshot()
    live = set() if parent is None else {path for path, _, _ in snapshot_data_files(txn._table.io, parent)}
    kept = []
    for removed, new in rewrites:
        gone = [f.path for f in removed if f"{location}/{f.path}" not in live]
        if gone:
            log.warning(
                "Iceberg table %s no longer holds %s (another writer removed it): the rewrite into %s is left out of it", table, gone[0], new.path
            )
        else:
            kept.append((removed, new))
    if not kept:
        return
    producer = _ReplaceFiles(
        commit_uuid=commit_uuid,
        operation=Operation.OVERWRITE,
        transaction=txn,
        io=txn._table.io,
        branch=MAIN_BRANCH,
        snapshot_properties=summary,
    )
    with producer as rewrite:
        for data_file in data_files(metadata, location, [f for removed, _ in kept for f in removed], table=table):
            data_file.spec_id = metadata.default_spec_id  # how the delete finds its manifests
            rewrite.delete_data_file(data_file)
        for data_file in data_files(metadata, location, [new for _, new in kept], table=table):
            rewrite.append_data_file(data_file)
