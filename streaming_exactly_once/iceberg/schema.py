"""A batch's Spark schema as an Iceberg schema, and whether it fits an existing Iceberg table.

Spark's schema JSON (kept in every commit record) is mapped type by type, the way Iceberg's
Spark integration maps them: ``byte``/``short``/``integer`` -> ``int`` (Spark writes all three as
Parquet INT32, which Iceberg readers read as ``int``), ``timestamp`` -> ``timestamptz`` (an
instant), ``timestamp_ntz`` -> ``timestamp``, ``decimal(p,s)``, arrays, maps and structs. A
Spark-nullable field is optional, a non-nullable one required - but a partition column, which
Spark's files do not hold, is always optional. Types without an Iceberg
counterpart (``void``, intervals, ``variant``) are refused before the batch is claimed.

An existing table fits a batch when (an append without schema evolution):

* its partition spec is an identity transform on each of the sink's ``partition_by`` columns,
  in order, and nothing else (partition values come from the files' ``k=v`` directories);
* every column of the batch is a table column of the same type, nested types included -
  nullability aside: what the table requires and the batch may leave null is made optional by
  the batch's commit (``relaxed_paths``), as the table schema's rules say (``docs/schema.md``);
* a table column the batch lacks is optional (readers give NULL for it);
* its name mapping, if it has one, maps each of our column names to that column's field id
  (Spark's Parquet files carry no field ids: readers resolve their columns by that mapping).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from ..errors import IcebergSchemaMismatchError, IcebergTableError
from ..storage.base import Storage

#: Format versions an append of our files is known to be correct for.
FORMAT_VERSIONS = (1, 2)
#: Spark types a partition column may have: their directory names mean the same to Spark and Iceberg.
PARTITION_TYPES = ("string", "byte", "short", "integer", "long", "boolean", "date")
#: Field ids of partition fields start here, as Iceberg's own writers number them.
PARTITION_FIELD_BASE = 1000

_PRIMITIVES: dict[str, IcebergType] = {
    "boolean": BooleanType(),
    "byte": IntegerType(),
    "short": IntegerType(),
    "integer": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "binary": BinaryType(),
    "date": DateType(),
    "timestamp": TimestamptzType(),
    "timestamp_ntz": TimestampType(),
}
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


class _Ids:
    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last += 1
        return self.last


def _type(spark: Any, ids: _Ids, where: str) -> IcebergType:
    if isinstance(spark, str):
        found = _PRIMITIVES.get(spark)
        if found is not None:
            return found
        decimal = _DECIMAL.match(spark)
        if decimal:
            return DecimalType(int(decimal.group(1)), int(decimal.group(2)))
        raise ValueError(f"{where} has Spark type {spark!r}, which Iceberg has no type for")
    kind = spark.get("type") if isinstance(spark, dict) else None
    if kind == "struct":
        return StructType(*_fields(spark, ids, where + "."))
    if kind == "array":
        element_id = ids.next()
        return ListType(element_id, _type(spark["elementType"], ids, where + "[]"), element_required=not spark.get("containsNull", True))
    if kind == "map":
        key_id, value_id = ids.next(), ids.next()
        return MapType(
            key_id,
            _type(spark["keyType"], ids, where + "{key}"),
            value_id,
            _type(spark["valueType"], ids, where + "{value}"),
            value_required=not spark.get("valueContainsNull", True),
        )
    raise ValueError(f"{where} has a Spark type Iceberg has no type for: {json.dumps(spark)[:100]}")


def _fields(struct: dict[str, Any], ids: _Ids, prefix: str) -> list[NestedField]:
    fields = struct.get("fields")
    if not isinstance(fields, list):
        raise ValueError(f"{prefix or 'the schema'} is not a struct")
    out = []
    # ids of a struct's own fields first, then of their children (Iceberg's usual numbering)
    own = [ids.next() for _ in fields]
    for field_id, field in zip(own, fields, strict=True):
        name = field["name"]
        out.append(NestedField(field_id, name, _type(field["type"], ids, f"column {prefix}{name}"), required=not field.get("nullable", True)))
    return out


def iceberg_schema(schema_json: str, *, table: str, optional: Sequence[str] = ()) -> Schema:
    """The Iceberg schema of a batch's Spark schema JSON (``IcebergSchemaMismatchError`` if it has
    none); the top-level columns named in ``optional`` are optional whatever Spark says (the
    partition columns: Spark's files do not hold them, and pyiceberg refuses a required column
    its file lacks - the value comes from the partition then)."""
    try:
        fields = _fields(json.loads(schema_json), _Ids(), "")
        return Schema(*[NestedField(f.field_id, f.name, f.field_type, required=False) if f.name in optional else f for f in fields])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise IcebergSchemaMismatchError(
            f"Iceberg table {table}: the batch's schema cannot be an Iceberg schema ({exc}). Cast such columns "
            "(e.g. NULL-typed or interval ones) to a type Iceberg has, e.g. string.",
            table=table,
            problems=[str(exc)],
        ) from None


def partition_spec(schema: Schema, partition_by: Sequence[str]) -> PartitionSpec:
    """Identity partitioning on ``partition_by``, in order."""
    return PartitionSpec(
        *[
            PartitionField(schema.find_field(name).field_id, PARTITION_FIELD_BASE + i, IdentityTransform(), name)
            for i, name in enumerate(partition_by)
        ]
    )


def check_partition_types(schema_json: str, partition_by: Sequence[str], *, table: str) -> None:
    types = {f.get("name"): f.get("type") for f in json.loads(schema_json).get("fields", [])}
    for column in partition_by:
        type_ = types.get(column)
        if type_ not in PARTITION_TYPES:
            raise IcebergSchemaMismatchError(
                f"Iceberg table {table}: partition column {column!r} has Spark type {json.dumps(type_)[:80]}; "
                f"format='iceberg' partitions by {', '.join(PARTITION_TYPES)} columns only (identity partitions "
                "whose directory names mean the same to Spark and to Iceberg readers). Partition by a derived "
                "column, e.g. to_date(ts) or a string.",
                table=table,
                column=column,
            )


def _shape(t: IcebergType) -> str:
    """A type without field ids or nullability, for comparison and messages."""
    if isinstance(t, StructType):
        return "struct<" + ",".join(f"{f.name}:{_shape(f.field_type)}" for f in t.fields) + ">"
    if isinstance(t, ListType):
        return f"list<{_shape(t.element_type)}>"
    if isinstance(t, MapType):
        return f"map<{_shape(t.key_type)},{_shape(t.value_type)}>"
    return str(t)


def relaxed_paths(table: Schema, batch: Schema, partition_by: Sequence[str] = ()) -> list[tuple[str, ...]]:
    """Paths of what the table requires and a batch of this shape may leave null - a column,
    a nested field, a list's elements (``element``), a map's values (``value``) - and the
    required partition columns (a table an earlier release created; ``iceberg_schema``). The
    commit makes them optional, in the metadata version of its snapshot (``evolve``): an
    Iceberg table must not say a column holds no nulls when our files may hold some."""
    out: list[tuple[str, ...]] = [(f.name,) for f in table.fields if f.required and f.name in partition_by]
    by_name = {f.name: f for f in table.fields}

    def walk(path: tuple[str, ...], t: IcebergType, b: IcebergType) -> None:
        if isinstance(t, StructType) and isinstance(b, StructType):
            for tf, bf in zip(t.fields, b.fields, strict=True):
                visit(path + (tf.name,), tf.required and not bf.required, tf.field_type, bf.field_type)
        elif isinstance(t, ListType) and isinstance(b, ListType):
            visit(path + ("element",), t.element_required and not b.element_required, t.element_type, b.element_type)
        elif isinstance(t, MapType) and isinstance(b, MapType):
            visit(path + ("value",), t.value_required and not b.value_required, t.value_type, b.value_type)

    def visit(path: tuple[str, ...], relax: bool, t: IcebergType, b: IcebergType) -> None:
        if relax and path not in out:
            out.append(path)
        walk(path, t, b)

    for field in batch.fields:
        known = by_name.get(field.name)
        if known is not None and _shape(known.field_type) == _shape(field.field_type):
            visit((field.name,), known.required and not field.required, known.field_type, field.field_type)
    return out


def schema_differences(metadata: TableMetadata, batch: Schema, partition_by: Sequence[str]) -> list[str]:
    """Why the batch cannot be appended to the table, one reason each (empty: it fits)."""
    problems = []
    table = metadata.schema()
    spec = metadata.spec()
    names = {f.field_id: f.name for f in table.fields}
    spec_text = [f"{f.transform}({names.get(f.source_id, f.source_id)})" for f in spec.fields]
    wanted = [f"identity({c})" for c in partition_by]
    if spec_text != wanted:
        problems.append(f"the table is partitioned by {spec_text or 'nothing'}, the sink by {wanted or 'nothing'}")
    by_name = {f.name: f for f in table.fields}
    batch_names = {f.name for f in batch.fields}
    for field in batch.fields:
        known = by_name.get(field.name)
        if known is None:
            problems.append(f"column {field.name!r} ({_shape(field.field_type)}) is not in the table")
        elif _shape(known.field_type) != _shape(field.field_type):
            problems.append(f"column {field.name!r} is {_shape(field.field_type)} in the batch, {_shape(known.field_type)} in the table")
    for field in table.fields:
        if field.name not in batch_names and field.required:
            problems.append(f"the table's required column {field.name!r} is not in the batch")
    mapping = metadata.name_mapping()
    if mapping is not None:
        mapped = {name: m.field_id for m in mapping.root for name in m.names}
        for field in batch.fields:
            known = by_name.get(field.name)
            if known is not None and mapped.get(field.name) != known.field_id:
                problems.append(
                    f"the table's name mapping (schema.name-mapping.default) maps {field.name!r} to field id "
                    f"{mapped.get(field.name)}, but that column's id is {known.field_id}"
                )
    return problems


#: what to do when a batch's columns do not fit the table
STREAM_ADVICE = "Select and cast the stream's columns to the table's schema (and use its partition columns), or write to a new table."


def check_fits(
    metadata: TableMetadata, batch: Schema, partition_by: Sequence[str], *, table: str, metadata_file: str, advice: str = STREAM_ADVICE
) -> None:
    problems = schema_differences(metadata, batch, partition_by)
    if problems:
        raise IcebergSchemaMismatchError(
            f"The batch does not fit the existing Iceberg table {table} (schema in {metadata_file}): "
            + "; ".join(problems[:8])
            + ("; ..." if len(problems) > 8 else "")
            + ". Nothing was written. "
            + advice,
            table=table,
            problems=problems,
        )


def check_appendable(metadata: TableMetadata, storage: Storage, *, name: str) -> None:
    """Refuse tables an append of our Parquet files would break."""
    from .fileio import relative_to, root_spellings

    reasons = []
    if metadata.format_version not in FORMAT_VERSIONS:
        reasons.append(
            f"it is format version {metadata.format_version} (appends of files written without Iceberg's writer "
            f"are verified for versions {', '.join(map(str, FORMAT_VERSIONS))})"
        )
    if relative_to(metadata.location.rstrip("/") + "/", root_spellings(storage)) != "":
        reasons.append(f"its location is {metadata.location}, not the sink's table directory")
    encrypted = sorted(k for k in metadata.properties if k.startswith("encryption."))
    if encrypted:
        reasons.append(f"it is encrypted ({', '.join(encrypted)}), and the sink's files are not")
    if reasons:
        raise IcebergTableError(
            f"Iceberg table {name} cannot take appended Parquet files: {'; '.join(reasons)}. Write to a new table, or to one without these features.",
            table=storage.root_uri,
        )
