"""Does a batch fit the Delta table it is appended to? Decided before the batch's WAL claim.

Spark's schema JSON (``df.schema.json()``, kept in every commit record) *is* Delta's schema
format (``schemaString`` in a Delta ``metaData`` action), so the two are compared field by
field without going through any engine. The rules are those of an append to a Delta table
without schema evolution:

* the partition columns must be the table's, in the table's order;
* every column of the batch must be a column of the table with the same type (nested types
  included; field metadata such as comments is ignored), whose nested fields, array elements
  and map values hold no null where the table's say none;
* a table column the batch lacks must be nullable (Delta readers give NULL for it).

The nullability of a top-level column the batch has is not compared here: the table schema's
rules (``table.schema_rules``) make the table's column nullable - nested ones too - and the
batch's Delta commit carries that schema (``evolve``), so the batch is checked against it.

Partition columns must have types whose directory names Spark and Delta spell the same way
(strings, integers, booleans, dates): a timestamp partition is named in Spark's session time
zone on disk, which a Delta ``partitionValues`` entry cannot say.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import DeltaSchemaMismatchError, DeltaTableError

PARTITION_TYPES = ("string", "byte", "short", "integer", "long", "boolean", "date")


def fields_of(schema_json: str) -> list[dict[str, Any]]:
    """The top-level fields of a Spark/Delta struct schema JSON string."""
    obj = json.loads(schema_json)
    if not isinstance(obj, dict) or obj.get("type") != "struct" or not isinstance(obj.get("fields"), list):
        raise ValueError("not a struct schema")
    fields: list[dict[str, Any]] = obj["fields"]
    return fields


def _bare(type_: Any) -> Any:
    """A type without field metadata (comments, column-mapping ids), for comparison."""
    if isinstance(type_, dict):
        out = {k: _bare(v) for k, v in type_.items() if k != "metadata"}
        return out
    if isinstance(type_, list):
        return [_bare(v) for v in type_]
    return type_


_FLAGS = ("nullable", "containsNull", "valueContainsNull")


def _shape(type_: Any) -> Any:
    """A type without field metadata and nullability flags."""
    if isinstance(type_, dict):
        return {k: _shape(v) for k, v in type_.items() if k != "metadata" and k not in _FLAGS}
    if isinstance(type_, list):
        return [_shape(v) for v in type_]
    return type_


def looser(table_type: Any, batch_type: Any) -> bool:
    """Whether the batch's type (of the table type's shape) may hold a null where the table's
    nested type says none: a struct field, an array element, a map value."""
    if not isinstance(table_type, dict) or not isinstance(batch_type, dict):
        return False
    if table_type.get("type") == "struct":
        return any(
            (not t.get("nullable", True) and b.get("nullable", True)) or looser(t["type"], b["type"])
            for t, b in zip(table_type["fields"], batch_type["fields"], strict=True)
        )
    if table_type.get("type") == "array":
        nulls = not table_type.get("containsNull", True) and batch_type.get("containsNull", True)
        return nulls or looser(table_type["elementType"], batch_type["elementType"])
    if table_type.get("type") == "map":
        nulls = not table_type.get("valueContainsNull", True) and batch_type.get("valueContainsNull", True)
        return nulls or looser(table_type["valueType"], batch_type["valueType"])
    return False


def _type_text(type_: Any) -> str:
    return type_ if isinstance(type_, str) else json.dumps(_bare(type_), separators=(",", ":"))[:120]


def check_partition_types(schema_json: str, partition_by: Sequence[str], *, table: str) -> None:
    types = {f["name"]: f["type"] for f in fields_of(schema_json)}
    for column in partition_by:
        type_ = types.get(column)
        if type_ not in PARTITION_TYPES:
            raise DeltaSchemaMismatchError(
                f"Delta table {table}: partition column {column!r} has type {_type_text(type_)}; format='delta' "
                f"partitions by {', '.join(PARTITION_TYPES)} columns only (their directory names mean the same to "
                "Spark and to Delta readers). Partition by a derived column, e.g. to_date(ts) or a string.",
                table=table,
                column=column,
            )


def schema_differences(table_schema: str, table_partitions: Sequence[str], batch_schema: str, partition_by: Sequence[str]) -> list[str]:
    """Why the batch cannot be appended, one reason per line (empty: it fits)."""
    problems = []
    if list(table_partitions) != list(partition_by):
        problems.append(f"the table is partitioned by {list(table_partitions)}, the sink by {list(partition_by)}")
    table_fields = {f["name"]: f for f in fields_of(table_schema)}
    batch_fields = {f["name"]: f for f in fields_of(batch_schema)}
    for name, field in batch_fields.items():
        known = table_fields.get(name)
        if known is None:
            problems.append(f"column {name!r} ({_type_text(field['type'])}) is not in the table")
        elif _shape(known["type"]) != _shape(field["type"]) or looser(known["type"], field["type"]):
            problems.append(f"column {name!r} is {_type_text(field['type'])} in the batch, {_type_text(known['type'])} in the table")
    for name, field in table_fields.items():
        if name not in batch_fields and not field.get("nullable", True):
            problems.append(f"the table's non-nullable column {name!r} is not in the batch")
    return problems


def check_fits(
    table_schema: str, table_partitions: Sequence[str], batch_schema: str, partition_by: Sequence[str], *, table: str, log_uri: str
) -> None:
    problems = schema_differences(table_schema, table_partitions, batch_schema, partition_by)
    if problems:
        raise DeltaSchemaMismatchError(
            f"The batch does not fit the existing Delta table {table} (schema in {log_uri}): "
            + "; ".join(problems[:8])
            + ("; ..." if len(problems) > 8 else "")
            + ". Nothing was written. Select and cast the stream's columns to the table's schema (and use its "
            "partition columns), or write to a new table.",
            table=table,
            problems=problems,
        )


#: Reader features a table may have: appended Parquet files still mean what they say.
_READER_FEATURES_OK = {"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"}
#: Writer features a table may have: the sink writes its commits itself (``evolve.commit_lines``),
#: and these ask nothing of an append of Parquet files beyond what is checked here (constraints,
#: generated, identity and mapped columns are refused by what they leave in the metadata). Any
#: other (rowTracking, inCommitTimestamp, icebergCompat*, clustering, allowColumnDefaults, ...)
#: asks a writer for more than it writes, and the table is refused.
_WRITER_FEATURES_OK = {
    "appendOnly",
    "invariants",
    "checkConstraints",
    "changeDataFeed",
    "generatedColumns",
    "columnMapping",
    "identityColumns",
    "timestampNtz",
    "domainMetadata",
    "v2Checkpoint",
    "vacuumProtocolCheck",
    "typeWidening",
    "variantType",
}
#: Schema metadata keys of features an append of files (that delta-rs does not look into) would break.
_SCHEMA_MARKERS = ("delta.columnMapping", "delta.generationExpression", "delta.identity", "delta.invariants")


def check_appendable(table: Any, root: str) -> None:
    """Refuse tables whose features a plain append of Parquet files would break."""
    protocol = table.protocol()
    reasons = []
    reader_features = set(protocol.reader_features or ())
    if protocol.min_reader_version == 2 or (reader_features - _READER_FEATURES_OK):
        reasons.append(
            "it requires reader features " + (", ".join(sorted(reader_features - _READER_FEATURES_OK)) or "of reader version 2 (column mapping)")
        )
    writer_features = set(protocol.writer_features or ()) - _WRITER_FEATURES_OK
    if protocol.min_writer_version > 7 or writer_features:
        reasons.append("it requires writer features " + (", ".join(sorted(writer_features)) or f"of writer version {protocol.min_writer_version}"))
    schema = table.schema().to_json()
    markers = [m for m in _SCHEMA_MARKERS if m in schema]
    if markers:
        reasons.append(f"its schema uses {', '.join(markers)}")
    constraints = [k for k in (table.metadata().configuration or {}) if k.startswith("delta.constraints.")]
    if constraints:
        reasons.append(f"it has CHECK constraints ({', '.join(sorted(constraints))})")
    if reasons:
        raise DeltaTableError(
            f"Delta table {root} cannot take appended Parquet files: {'; '.join(reasons)}. "
            "The sink adds files it wrote without Delta's writer (which would map column names, evaluate "
            "constraints or compute columns). Write to a new table, or to one without these features.",
            table=root,
        )
