"""The Spark schema Spark's Parquet reader gives a file, from its footer alone.

Used where the sink takes over Parquet files it did not write (``commit.adoption``): the table's
schema then starts from theirs, so it must be what Spark reads them as, column for column -
Spark reads ``UINT_8`` as ``short`` and ``UINT_64`` as ``decimal(20,0)``, ``INT96`` as
``timestamp``, a timestamp adjusted to UTC as ``timestamp`` and one that is not as
``timestamp_ntz``, a dictionary-encoded (pandas categorical) column as its values' type. A
column Spark cannot read at all is refused (``UnreadableColumn``) rather than guessed:
nanosecond timestamps (pandas' default; Spark: ``PARQUET_TYPE_ILLEGAL``), times, half floats,
256-bit decimals and columns of the Arrow type ``null`` (a column that was all nulls).
"""

from __future__ import annotations

import json
from typing import Any


class UnreadableColumn(ValueError):
    """A column of a Parquet file that Spark's reader cannot read; ``column``, ``why``."""

    def __init__(self, column: str, why: str) -> None:
        super().__init__(f"column {column!r}: {why}")
        self.column = column
        self.why = why


def spark_schema_json(metadata: Any) -> str:  # metadata: a pyarrow FileMetaData
    """The file's columns as Spark's schema JSON (``StructType.json()``); ``UnreadableColumn``
    for a column Spark cannot read."""
    physical = {metadata.schema.column(i).path: metadata.schema.column(i).physical_type for i in range(metadata.num_columns)}
    arrow = metadata.schema.to_arrow_schema()
    return json.dumps({"type": "struct", "fields": [_field(f, f.name, physical) for f in arrow]}, separators=(",", ":"))


def _field(field: Any, path: str, physical: dict[str, str]) -> dict[str, Any]:
    return {"name": field.name, "type": _type(field.type, path, physical), "nullable": bool(field.nullable), "metadata": {}}


def _type(t: Any, path: str, physical: dict[str, str]) -> Any:
    import pyarrow.types as pt

    if pt.is_dictionary(t):
        return _type(t.value_type, path, physical)
    simple = _simple(t)
    if simple is not None:
        return simple
    if pt.is_timestamp(t):
        if physical.get(path) == "INT96":
            return "timestamp"  # Spark's own legacy encoding, read as a timestamp whatever Arrow says
        if t.unit == "ns":
            raise UnreadableColumn(path, "nanosecond timestamps, which Spark cannot read (PARQUET_TYPE_ILLEGAL); write them as microseconds")
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pt.is_decimal(t) and t.precision <= 38 and not pt.is_decimal256(t):
        return f"decimal({t.precision},{t.scale})"
    if pt.is_list(t) or pt.is_large_list(t) or pt.is_fixed_size_list(t):
        item = t.value_field
        return {"type": "array", "elementType": _type(item.type, f"{path}.list.{item.name}", physical), "containsNull": bool(item.nullable)}
    if pt.is_map(t):
        key, value = t.key_field, t.item_field
        return {
            "type": "map",
            "keyType": _type(key.type, f"{path}.key_value.key", physical),
            "valueType": _type(value.type, f"{path}.key_value.value", physical),
            "valueContainsNull": bool(value.nullable),
        }
    if pt.is_struct(t):
        return {"type": "struct", "fields": [_field(t.field(i), f"{path}.{t.field(i).name}", physical) for i in range(t.num_fields)]}
    raise UnreadableColumn(path, f"Arrow type {t}, which Spark's Parquet reader cannot read")


def _simple(t: Any) -> str | None:
    """Spark's name of a type without parameters Spark's reader has (None: another kind)."""
    import pyarrow.types as pt

    for test, name in (
        (pt.is_boolean, "boolean"),
        (pt.is_int8, "byte"),
        (pt.is_int16, "short"),
        (pt.is_int32, "integer"),
        (pt.is_int64, "long"),
        (pt.is_uint8, "short"),
        (pt.is_uint16, "integer"),
        (pt.is_uint32, "long"),
        (pt.is_uint64, "decimal(20,0)"),
        (pt.is_float32, "float"),
        (pt.is_float64, "double"),
        (pt.is_date32, "date"),
        (pt.is_date64, "date"),
        (pt.is_string, "string"),
        (pt.is_large_string, "string"),
        (pt.is_binary, "binary"),
        (pt.is_large_binary, "binary"),
        (pt.is_fixed_size_binary, "binary"),
    ):
        if test(t):
            return name
    return None
