"""``verify``: committed Parquet files whose schema disagrees with the table's.

The writer checks every batch against the table schema (``commit.table_schema``), so a table
written by this release only has files that agree with it. Files written before the table had a
schema record - or by another tool - may not; each file's footer is read (one read of its last
bytes) and its columns compared with the table schema's:

* **error** ``file-schema``: a column with another type than the table's that is no narrower
  type of it (``long`` in the table, ``string`` in the file): readers fail on the file (Spark:
  ``PARQUET_COLUMN_DATA_TYPE_MISMATCH``), or read it wrongly; a non-nullable table column the
  file lacks;
* **warning** ``file-schema-narrower``: a narrower type (``integer`` in a ``long`` column, after
  ``add_and_widen``): this library's readers and Spark given the schema read it, vanilla
  ``spark.read.parquet`` infers the schema from one file and may not;
* **warning** ``file-schema-extra``: a column the table schema does not have: readers of the
  table schema do not return it.

Problems are reported per column and type, with how many files and one of them. A file missing
a nullable column is fine (its rows read as null). Timestamps of any unit and nested types of the
same kind are not told apart: Spark writes timestamps as INT96 by default. A ``variant`` column
is a struct of binary ``metadata`` and ``value`` (and ``typed_value`` where Spark shredded it) in
the file, as Parquet's variant encoding stores it.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..readers.committed_files import CommittedFiles
from ..storage.base import Storage
from ..storage.parquet_footer import read_footer
from ..table.schema_rules import WIDENINGS, fields_of, shape, type_text


def footer_schema(storage: Storage, path: str) -> Any:  # a pyarrow Schema, or None if unreadable
    """The Arrow schema in the footer of the Parquet file at ``path`` (None: not a Parquet file)."""
    metadata = read_footer(storage, path)
    return None if metadata is None else metadata.schema.to_arrow_schema()


def spark_kind(arrow_type: Any) -> str | None:
    """The Spark type name an Arrow type of a Parquet file reads as (``timestamp``, ``array``,
    ``struct``, ``map`` for any unit or element type); None if none is known."""
    import pyarrow.types as t

    simple: list[tuple[Callable[[Any], bool], str]] = [
        (t.is_int8, "byte"),
        (t.is_int16, "short"),
        (t.is_int32, "integer"),
        (t.is_int64, "long"),
        (t.is_float32, "float"),
        (t.is_float64, "double"),
        (t.is_boolean, "boolean"),
        (t.is_date32, "date"),
        (t.is_timestamp, "timestamp"),
        (t.is_list, "array"),
        (t.is_large_list, "array"),
        (t.is_struct, "struct"),
        (t.is_map, "map"),
    ]
    for test, name in simple:
        if test(arrow_type):
            return name
    if t.is_string(arrow_type) or t.is_large_string(arrow_type):
        return "string"
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type):
        return "binary"
    if t.is_decimal(arrow_type):
        return f"decimal({arrow_type.precision},{arrow_type.scale})"
    return None


def _variant_layout(arrow_type: Any) -> bool:
    """Whether a file's column is Parquet's encoding of a ``variant`` (Spark 4 writes one as a
    group of a binary ``metadata``, a binary ``value`` and, shredded, a ``typed_value``; Arrow
    reads the group as a plain struct)."""
    import pyarrow.types as t

    if not t.is_struct(arrow_type):
        return False
    fields = {arrow_type.field(i).name: arrow_type.field(i).type for i in range(arrow_type.num_fields)}
    binary = (t.is_binary, t.is_large_binary)
    return (
        set(fields) <= {"metadata", "value", "typed_value"}
        and "metadata" in fields
        and any(is_(fields["metadata"]) for is_ in binary)
        and ("value" in fields or "typed_value" in fields)
        and ("value" not in fields or any(is_(fields["value"]) for is_ in binary))
    )


def _table_kind(type_: Any) -> str:
    bare = shape(type_)
    if isinstance(bare, dict):
        return str(bare.get("type"))
    return "timestamp" if bare == "timestamp_ntz" else str(bare).replace(", ", ",")


def check_file_schemas(files: CommittedFiles, table_schema: str, partition_by: tuple[str, ...]) -> list[tuple[str, str, str, str]]:
    """(severity, kind, example URI, detail) per disagreement of ``files`` with ``table_schema``."""
    table = {f["name"]: f for f in fields_of(table_schema) if f["name"] not in partition_by}
    storage = files.storage
    paths = [rel for rel, _ in files.relative_sizes() if rel.endswith(".parquet")]
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="seo-verify") as pool:
        schemas = list(pool.map(lambda rel: footer_schema(storage, rel), paths))
    found: dict[tuple[str, str, str], list[str]] = {}  # (kind, column, the file's type) -> files
    for rel, schema in zip(paths, schemas, strict=True):
        if schema is None:
            continue
        names = set(schema.names)
        for name, f in table.items():
            if name not in names and not f.get("nullable", True):
                found.setdefault(("file-schema", name, "-"), []).append(rel)
        for field in schema:
            kind = spark_kind(field.type)
            if field.name not in table:
                found.setdefault(("file-schema-extra", field.name, kind or str(field.type)), []).append(rel)
                continue
            want = _table_kind(table[field.name]["type"])
            if kind is None or kind == want or (want == "variant" and _variant_layout(field.type)):
                continue
            problem = "file-schema-narrower" if (kind, want) in WIDENINGS else "file-schema"
            found.setdefault((problem, field.name, kind), []).append(rel)
    out = []
    for (kind, column, file_type), rels in sorted(found.items()):
        example = storage.uri(rels[0])
        count = f"{len(rels)} file(s), e.g. this one,"
        if kind == "file-schema-extra":
            detail = f"{count} have column {column!r} ({file_type}), which the table schema does not: readers of the table do not return it"
            out.append(("warning", kind, example, detail))
            continue
        table_type = type_text(table[column]["type"], bool(table[column].get("nullable", True)))
        if file_type == "-":
            detail = f"{count} lack the table's non-nullable column {column!r}: its rows read as null"
        elif kind == "file-schema-narrower":
            detail = (
                f"{count} have column {column!r} as {file_type}, narrower than the table's {table_type}: this library's readers "
                "and Spark given the table's schema read it (read.schema), spark.read.parquet alone may fail"
            )
        else:
            detail = (
                f"{count} have column {column!r} as {file_type}, the table schema says {table_type}: readers fail on these files "
                "(Spark: PARQUET_COLUMN_DATA_TYPE_MISMATCH) or read them wrongly. Rewrite them with the table's type, or "
                "remove them from the table"
            )
        out.append(("warning" if kind == "file-schema-narrower" else "error", kind, example, detail))
    return out
