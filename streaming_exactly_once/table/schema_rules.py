"""Does a batch fit its table's schema? The rules, as one pure function over Spark schema JSON.

A table's schema is a Spark struct schema (``df.schema.json()``, partition columns included);
``compare`` judges a batch's schema against it and says, column by column, what happens. The
rules follow what the readers of the table's files can read (``docs/design/schema-rules.md``
has the readers' table and the reasons; ``tests/table/test_schema_readers.py`` repeats it):

* **same type** - written as is; the table's column becomes nullable if the batch's is (``relax``);
* **narrower** (``WIDENINGS``) - cast up before it is written (``casts``);
* **a table column the batch lacks** - nullable: written as nulls (``fills``); else refused;
* **a column the table lacks** - refused unless evolution adds columns; then added, nullable,
  after the table's columns (``added``);
* **wider** - refused unless evolution widens (``add_and_widen``, ``WIDENING_FORMATS`` only,
  never a Delta or Iceberg table); then the table's type becomes the wider one;
* **any other change** (type, nested type, a name differing only in case, partition columns) - refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: ``schema_evolution`` values: nothing changes the schema; new columns may be added; new
#: columns and the ``WIDENINGS``.
EVOLUTION_MODES = ("none", "add_columns", "add_and_widen")
#: Formats whose files carry their schema, so that columns can be added (CSV and text are
#: positional; ORC and Avro are not verified here); the table formats add them to their own
#: schema in the batch's commit (``delta.evolve``, ``iceberg.evolve``).
EVOLVING_FORMATS = ("parquet", "json", "delta", "iceberg", "delta+iceberg")
#: Formats whose readers read a narrower type as a wider one given the wider schema.
WIDENING_FORMATS = ("parquet", "json")

_INTEGRAL = ("byte", "short", "integer", "long")
#: (narrower, wider) type pairs every reader of this library reads as the wider type.
WIDENINGS = frozenset(
    [(a, b) for i, a in enumerate(_INTEGRAL) for b in _INTEGRAL[i + 1 :]]
    + [("float", "double")]
    + [(a, "double") for a in ("byte", "short", "integer")]
)


@dataclass(frozen=True)
class Mismatch:
    """One reason a batch does not fit: the column, how the table and the batch have it."""

    column: str
    table: str  # the table's side, e.g. "long" or "long not null" or "-" (absent)
    batch: str
    problem: str  # why it cannot be written, one short clause
    kind: str  # "type" | "widen" | "added" | "dropped" | "case" | "partitioning"

    def summary(self) -> str:
        if self.kind == "partitioning":
            return f"the table is partitioned by {self.table}, the sink by {self.batch}"
        if self.kind == "added":
            return f"column {self.column!r} ({self.batch}) is not in the table"
        if self.kind == "dropped":
            return f"the table's non-nullable column {self.column!r} is not in the batch"
        if self.kind == "case":  # ``batch``: "<its name>: <type>"
            return f"column {self.column!r} ({self.table}) is {self.batch.split(':', 1)[0]!r} in the batch, a name differing only in case"
        return f"column {self.column!r} is {self.batch} in the batch, {self.table} in the table"

    def to_json(self) -> dict[str, str]:
        return {"column": self.column, "table": self.table, "batch": self.batch, "problem": self.problem, "kind": self.kind}


@dataclass(frozen=True)
class Verdict:
    """What writing a batch means for its table (``compare``)."""

    #: the table's schema after the batch (the batch's own when it creates the table)
    schema: str
    #: why the batch cannot be written as it is; empty: it can
    mismatches: tuple[Mismatch, ...] = ()
    #: the table's schema changes with this batch (created, columns added, types widened)
    changed: bool = False
    #: what changes, for people: "added column 'x' (string)", "widened 'id': integer -> long"
    changes: tuple[str, ...] = ()
    #: columns the batch has narrower than the table: cast up before writing
    casts: tuple[str, ...] = ()
    #: nullable table columns the batch lacks: written as nulls
    fills: tuple[str, ...] = ()
    #: the batch's columns are not the table's in the table's order (CSV files are positional)
    reordered: bool = False
    #: columns the batch adds: written nullable, as the table records them (a file that has one
    #: as required makes ``mergeSchema`` readers fail on the files without it)
    added: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return not self.mismatches

    @property
    def needs_alignment(self) -> bool:
        """The batch must be conformed to ``schema`` before its files are written."""
        return bool(self.casts or self.fills or self.reordered or self.added)


def fields_of(schema_json: str) -> list[dict[str, Any]]:
    """The top-level fields of a Spark struct schema JSON; ``ValueError`` if it is none."""
    obj = json.loads(schema_json)
    if not isinstance(obj, dict) or obj.get("type") != "struct" or not isinstance(obj.get("fields"), list):
        raise ValueError("not a Spark struct schema")
    fields: list[dict[str, Any]] = obj["fields"]
    if not all(isinstance(f, dict) and isinstance(f.get("name"), str) and "type" in f for f in fields):
        raise ValueError("a field of the schema has no name or type")
    return fields


def struct_json(fields: Sequence[dict[str, Any]]) -> str:
    """A Spark struct schema JSON of ``fields``, compact as Spark writes it."""
    return json.dumps({"type": "struct", "fields": list(fields)}, separators=(",", ":"))


def shape(type_: Any) -> Any:
    """A type as readers compare it: without field metadata and without nullability."""
    if isinstance(type_, dict):
        return {k: shape(v) for k, v in type_.items() if k not in ("metadata", "nullable", "containsNull", "valueContainsNull")}
    if isinstance(type_, list):
        return [shape(v) for v in type_]
    return type_


def relax(table_type: Any, batch_type: Any) -> Any:
    """``table_type`` with every nested nullability flag the batch's type of the same shape sets
    (a struct's fields, an array's elements, a map's values may hold null where either says so)."""
    if not isinstance(table_type, dict) or not isinstance(batch_type, dict):
        return table_type
    out = dict(table_type)
    kind = table_type.get("type")
    if kind == "struct":
        out["fields"] = [
            {**t, "type": relax(t["type"], b["type"]), "nullable": bool(t.get("nullable", True) or b.get("nullable", True))}
            for t, b in zip(table_type["fields"], batch_type["fields"], strict=True)
        ]
    elif kind == "array":
        out["elementType"] = relax(table_type["elementType"], batch_type["elementType"])
        out["containsNull"] = bool(table_type.get("containsNull", True) or batch_type.get("containsNull", True))
    elif kind == "map":
        out["valueType"] = relax(table_type["valueType"], batch_type["valueType"])
        out["valueContainsNull"] = bool(table_type.get("valueContainsNull", True) or batch_type.get("valueContainsNull", True))
    return out


def type_text(type_: Any, nullable: bool = True) -> str:
    """A type for people: ``long``, ``long not null``, ``struct<...>`` (nested JSON, cut short)."""
    text = type_ if isinstance(type_, str) else json.dumps(shape(type_), separators=(",", ":"))
    if len(text) > 60:
        text = text[:57] + "..."
    return text if nullable else f"{text} not null"


def _field(f: dict[str, Any]) -> str:
    return type_text(f["type"], bool(f.get("nullable", True)))


@dataclass
class _Judgement:
    """What ``compare`` finds, column by column."""

    mismatches: list[Mismatch] = field(default_factory=list)
    result: list[dict[str, Any]] = field(default_factory=list)  # the table's columns after the batch
    changes: list[str] = field(default_factory=list)
    casts: list[str] = field(default_factory=list)
    fills: list[str] = field(default_factory=list)


#: why a table format's column is not widened, by ``table_format``
_NOT_WIDENED = {
    "delta": "Delta tables are not widened by this library (Delta's typeWidening feature)",
    "iceberg": "Iceberg tables are not widened by this library (Iceberg's type promotion)",
    "delta+iceberg": "Delta and Iceberg tables are not widened by this library",
}


def _judge_type(t: dict[str, Any], b: dict[str, Any], j: _Judgement, *, widens: bool, table_format: str | None, file_format: str) -> None:
    """A column both have: the table's column after the batch, or why the batch is refused."""
    name = t["name"]
    old, new = shape(t["type"]), shape(b["type"])
    pair = (old, new) if isinstance(old, str) and isinstance(new, str) else None  # atomic types only widen
    refused = len(j.mismatches)
    if old == new:
        inside = relax(t["type"], b["type"])
        if inside != t["type"]:
            j.changes.append(f"nested fields of {name!r} may hold nulls")
        j.result.append(t if inside == t["type"] else {**t, "type": inside})
    elif pair is not None and (new, old) in WIDENINGS:
        j.casts.append(name)  # narrower than the table: cast up, the files keep the table's type
        j.result.append(t)
    elif pair is not None and pair in WIDENINGS and widens:
        j.changes.append(f"widened {name!r}: {old} -> {new}")
        j.result.append({**t, "type": b["type"]})
    elif pair is not None and pair in WIDENINGS:
        why = (
            _NOT_WIDENED.get(table_format, _NOT_WIDENED["delta"])
            if table_format
            else f"{file_format} files are not widened"
            if file_format not in WIDENING_FORMATS
            else "a wider type needs schema_evolution='add_and_widen'"
        )
        j.mismatches.append(Mismatch(name, _field(t), _field(b), why, "widen"))
        j.result.append(t)
    else:
        j.mismatches.append(Mismatch(name, _field(t), _field(b), "another type: readers cannot read both", "type"))
        j.result.append(t)
    if len(j.mismatches) == refused and not t.get("nullable", True) and b.get("nullable", True):
        j.changes.append(f"{name!r} may hold nulls")  # the table says what its rows may hold
        j.result[-1] = {**j.result[-1], "nullable": True}


def _new_columns(batch: list[dict[str, Any]], known: set[str], j: _Judgement, *, adds: bool, evolution: str, file_format: str) -> list[str]:
    """The batch's columns the table lacks: added (their names), or why the batch is refused."""
    added: list[str] = []
    for b in batch:
        if b["name"].lower() in known:
            continue
        if adds:
            j.changes.append(f"added column {b['name']!r} ({type_text(b['type'])})")
            j.result.append({**b, "nullable": True})
            added.append(b["name"])
        else:
            why = f"{file_format} tables do not add columns" if evolution != "none" else "a new column needs schema_evolution='add_columns'"
            j.mismatches.append(Mismatch(b["name"], "-", _field(b), why, "added"))
    return added


def compare(
    table_schema: str | None,
    table_partitions: Sequence[str],
    batch_schema: str,
    partition_by: Sequence[str],
    *,
    evolution: str = "none",
    table_format: str | None = None,
    file_format: str = "parquet",
) -> Verdict:
    """Judge ``batch_schema`` (partitioned by ``partition_by``) against the table (module docstring).

    ``table_schema`` None: the table has none yet - the batch's becomes it. ``table_format``: the
    table is also a Delta or Iceberg table (``"delta"``, ``"iceberg"``, ``"delta+iceberg"``:
    never widened); ``file_format``: its files' format.
    """
    batch = fields_of(batch_schema)
    if table_schema is None:
        return Verdict(schema=struct_json(batch), changed=True, changes=("created",))
    table = fields_of(table_schema)
    j = _Judgement()
    mismatches, result, changes, casts, fills = j.mismatches, j.result, j.changes, j.casts, j.fills
    if list(table_partitions) != list(partition_by):
        mismatches.append(
            Mismatch(
                "(partition columns)",
                str(list(table_partitions)),
                str(list(partition_by)),
                "other partition columns: files would be laid out another way",
                "partitioning",
            )
        )
    adds = evolution in ("add_columns", "add_and_widen") and file_format in EVOLVING_FORMATS
    widens = evolution == "add_and_widen" and not table_format and file_format in WIDENING_FORMATS
    by_name = {f["name"]: f for f in batch}
    by_lower = {f["name"].lower(): f for f in batch}
    for t in table:
        name = t["name"]
        b = by_name.get(name)
        if b is None and name.lower() in by_lower:
            other = by_lower[name.lower()]
            mismatches.append(
                Mismatch(
                    name,
                    _field(t),
                    f"{other['name']}: {_field(other)}",
                    "the name differs only in case: Spark matches it, Arrow readers do not",
                    "case",
                )
            )
            result.append(t)
            continue
        if b is None:
            if not t.get("nullable", True):
                mismatches.append(Mismatch(name, _field(t), "-", "a non-nullable column is missing: it would read as null", "dropped"))
            else:
                fills.append(name)
            result.append(t)
            continue
        _judge_type(t, b, j, widens=widens, table_format=table_format, file_format=file_format)
    added = _new_columns(batch, {t["name"].lower() for t in table}, j, adds=adds, evolution=evolution, file_format=file_format)
    order = [f["name"] for f in result]
    reordered = [f["name"] for f in batch] != order
    return Verdict(
        schema=struct_json(result) if changes else table_schema,
        mismatches=tuple(mismatches),
        changed=bool(changes),
        changes=tuple(changes),
        casts=tuple(casts),
        fills=tuple(fills),
        reordered=reordered,
        added=tuple(added),
    )


def side_by_side(mismatches: Sequence[Mismatch]) -> str:
    """The mismatches as an aligned table: column, the table's type, the batch's, the problem."""
    rows = [("column", "table", "batch", "problem")] + [(m.column, m.table, m.batch, m.problem) for m in mismatches]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join("  " + "  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows)


def _example(mismatches: Sequence[Mismatch]) -> str:
    """`` (e.g. ...)`` with the fix of the first column the batch has under another type or
    name; empty for a nested type (no short cast to show)."""
    for m in mismatches:
        wanted = m.table.removesuffix(" not null")
        simple = wanted.replace("_", "").isalnum() or re.fullmatch(r"decimal\(\d+,\d+\)", wanted)
        if m.kind == "type" and simple:
            return f" (e.g. df.withColumn({m.column!r}, col({m.column!r}).cast({wanted!r})))"
        if m.kind == "case":
            return f" (e.g. df.withColumnRenamed({m.batch.split(':')[0]!r}, {m.column!r}))"
    return ""


def advice(mismatches: Sequence[Mismatch], *, table_format: str | None) -> str:
    """What to do about ``mismatches``, one sentence per kind of problem."""
    kinds = {m.kind for m in mismatches}
    out = []
    if kinds & {"type", "case"}:
        out.append(f"select and cast the stream's columns to the table's names and types{_example(mismatches)}, or write to a new table")
    if "widen" in kinds:
        out.append("cast the column to the table's type" + ("" if table_format else ", or pass schema_evolution='add_and_widen' to widen the table"))
    if "added" in kinds:
        out.append("drop the new column(s), or pass schema_evolution='add_columns' to add them (nullable)")
    if "dropped" in kinds:
        out.append("add the missing column(s) to the stream (a non-nullable column cannot be left out)")
    if "partitioning" in kinds:
        out.append("use the table's partition columns, or write to a new table")
    return "; ".join(out)
