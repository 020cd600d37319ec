"""A batch's files as pyiceberg ``DataFile``s: location, size, row count and partition values.

Built from what the commit step knows (``files.IcebergFile``) instead of pyiceberg's
``add_files``, which opens each file again and derives partition values from column
statistics - Spark's files hold no partition columns (those live in the directory names), and
their values would be guessed from bounds this layer deliberately does not record.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.types import BooleanType, DateType, IcebergType, IntegerType, LongType, StringType

from ..errors import IcebergTableError
from .files import IcebergFile, partition_values

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
        f"{column!r} in the Iceberg table. The file was written with another schema; discard the pending batch "
        "(`seo recover <table> --discard-wal M`) and write it again.",
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
