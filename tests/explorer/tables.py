"""The tables a program writes, and where each record belongs.

A single table (``ExactlyOnceSink``) receives every eligible record. A dataset group
(``DatasetSink``, ``Setup.group``) has two outputs: ``all`` (every record) and ``byp``, split by
``p`` into one table per value. A row that fails the group's row check (``v >= 0``) goes to the
table's row quarantine; a table's batch that fails the mandatory batch check (the *gate*: no
``v`` of 10000 or more) goes to its batch quarantine under ``policy="partial"``, and fails the
whole batch under ``"full"``. So a record is checked once across a table and its two
quarantine tables (``TableSpec.quarantine``), and where it may be is checked apart
(``placement``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.explorer.world import Record

if TYPE_CHECKING:
    from tests.explorer.interpreter import Interpreter

#: the gate: a table's batch holding a ``v`` at least this big fails the mandatory batch check
POISON_V = 10_000
ROW_CHECK = "v >= 0"
DATASET_VALUES = ("0", "1", "2")


def is_bad(record: Record) -> bool:
    """Fails the row check."""
    return record.v is not None and record.v < 0


def is_poison(record: Record) -> bool:
    """Fails the gate."""
    return record.v is not None and record.v >= POISON_V


@dataclass(frozen=True)
class TableSpec:
    name: str
    path: Path
    routed: Callable[[Record], bool] | None = None
    #: row quarantine, batch quarantine (a group's tables only)
    quarantine: tuple[Path, Path] | None = None

    @property
    def main(self) -> bool:
        """The table a downstream query reads (the single table, or the group's ``all``)."""
        return self.name in ("table", "all")


def tables_of(it: Interpreter) -> list[TableSpec]:
    root = it.world.table
    if not it.setup.group:
        return [TableSpec("table", root)]
    out = [TableSpec("all", root / "all", None, _quarantine(root, "all"))]
    for p in DATASET_VALUES:
        out.append(TableSpec(f"byp/{p}", root / "byp" / p, _route(p), _quarantine(root, f"byp/{p}")))
    return out


def has_manifest(it: Interpreter) -> bool:
    """A batch was committed: the table's, or for a group one of its outputs' (the group's root
    holds no manifest of its own)."""
    from tests.explorer.readers import readable

    return any(readable(spec.path) for spec in tables_of(it))


def _route(p: str) -> Callable[[Record], bool]:
    return lambda r: r.p == p


def _quarantine(root: Path, table: str) -> tuple[Path, Path]:
    return root / "_quarantine" / "rows" / table, root / "_quarantine" / "batches" / table


def group_options(setup: Any, gate: bool) -> dict[str, Any]:
    """The ``DatasetSink`` outputs, checks and policy of a group program (built where the sink
    is: checks hold a callable)."""
    from streaming_exactly_once import Check, Output

    partition = ("p",) if setup.get("partitioned") else None
    outputs = [Output("all", partition_by=partition), Output("byp", dataset_column="p")]
    checks = [Check.row(ROW_CHECK, name="v not negative")]
    if gate:
        checks.append(Check.batch(_gate, name=f"v below {POISON_V}"))
    return {"outputs": outputs, "checks": checks, "policy": setup.get("policy", "full"), "watermark_columns": ["v"]}


def _gate(metrics: Any) -> bool:
    high = (metrics.get("watermarks") or {}).get("v") or {}
    return high.get("max") is None or high["max"] < POISON_V
