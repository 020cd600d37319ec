"""Pinned column types for Python engines, from the Spark schema the sink recorded.

Left alone, every engine guesses partition column types from directory names (``day=20240101``
becomes an integer in one engine and a string in another) and Arrow takes the data schema of the
first file it opens. The sink records the Spark schema of each batch in its commit record;
readers turn it into one Arrow schema so that Spark, pyarrow, pandas, Polars and DuckDB agree.
Without a recorded schema (a table written by Spark's own sink) partition columns are strings.
A recorded schema that is not Spark's schema JSON (``schema_fields`` says why) is not used.
"""

from __future__ import annotations

import re
from typing import Any

from ..log.version import loads_line

_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


def spark_type_to_arrow(spark_type: Any) -> Any:  # a pyarrow DataType or None
    """An Arrow type for a Spark JSON type, or None when there is no faithful mapping."""
    import pyarrow as pa

    simple = {
        "string": pa.string(),
        "long": pa.int64(),
        "integer": pa.int32(),
        "short": pa.int16(),
        "byte": pa.int8(),
        "boolean": pa.bool_(),
        "double": pa.float64(),
        "float": pa.float32(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"),
        "binary": pa.binary(),
    }
    if isinstance(spark_type, str):
        if spark_type in simple:
            return simple[spark_type]
        match = _DECIMAL.match(spark_type)
        if match:
            return pa.decimal128(int(match.group(1)), int(match.group(2)))
        return None
    if isinstance(spark_type, dict):
        kind = spark_type.get("type")
        if kind == "array":
            inner = spark_type_to_arrow(spark_type.get("elementType"))
            return None if inner is None else pa.list_(inner)
        if kind == "struct":
            fields = []
            for f in spark_type.get("fields", []):
                t = spark_type_to_arrow(f.get("type"))
                if t is None:
                    return None
                fields.append(pa.field(f["name"], t, nullable=f.get("nullable", True)))
            return pa.struct(fields)
        if kind == "map":
            k, v = spark_type_to_arrow(spark_type.get("keyType")), spark_type_to_arrow(spark_type.get("valueType"))
            return None if k is None or v is None else pa.map_(k, v)
    return None


def schema_fields(schema_json: str) -> list[dict[str, Any]]:
    """The ``fields`` of a Spark schema JSON (``{"type":"struct","fields":[{"name":...}]}``);
    ``ValueError`` saying what is wrong if it is not one."""
    schema = loads_line(schema_json)
    if not isinstance(schema, dict) or not isinstance(schema.get("fields", []), list):
        raise ValueError("not a Spark struct schema")
    fields = schema.get("fields", [])
    if not all(isinstance(f, dict) and isinstance(f.get("name"), str) for f in fields):
        raise ValueError("a field of the schema has no name")
    named: list[dict[str, Any]] = fields
    return named


def table_schema(schema_json: str | None, partition_columns: tuple[str, ...]) -> tuple[Any, Any]:  # pyarrow Schemas
    """(full Arrow schema or None, Arrow schema of the partition columns)."""
    import pyarrow as pa

    if not schema_json:
        return None, pa.schema([pa.field(c, pa.string()) for c in partition_columns])
    fields_json = schema_fields(schema_json)
    full: list[Any] | None = []  # pyarrow fields; None: a type has no faithful mapping
    parts: dict[str, Any] = {}
    for f in fields_json:
        arrow_type = spark_type_to_arrow(f.get("type"))
        if arrow_type is None:
            full = None
        elif full is not None:
            full.append(pa.field(f["name"], arrow_type, nullable=f.get("nullable", True)))
        if f["name"] in partition_columns:
            parts[f["name"]] = arrow_type or pa.string()
    partition_schema = pa.schema([pa.field(c, parts.get(c, pa.string())) for c in partition_columns])
    if full is not None:
        # partition columns last, as every engine presents them
        data = [f for f in full if f.name not in partition_columns]
        full = pa.schema(data + list(partition_schema))
    return full, partition_schema
