"""Quality gates: row-level checks that divert bad rows, batch-level checks that stop a bad batch.

Row checks are SQL predicates evaluated on every row in the pass that writes the batch; a row
that fails any of them (or makes it NULL) goes to the quarantine table with the names of the
checks it failed, and is counted. Batch checks look at per-output metrics that the write already
produced (row count, null counts, min/max, the schema) - no extra pass over the data::

    Check.row("amount >= 0")                         row level: failing rows are quarantined
    Check.rows_between(1, 1_000_000)                 batch level, mandatory by default
    Check.null_fraction("user_id", at_most=0.01)
    Check.schema("event_id LONG, amount DOUBLE")     the batch must have these columns and types
    Check.batch(lambda m: m["rows"] % 2 == 0, name="even", mandatory=False)

A failed *mandatory* batch check keeps that output's batch from being published (what happens
then is the sink's commit policy: ``full`` fails the whole batch, ``partial`` quarantines only
the failed outputs); a failed optional check is recorded as a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..log.record_fields import encode, json_field


@dataclass(frozen=True)
class CheckResult:
    name: str = field(metadata=json_field("name", str))
    passed: bool = field(metadata=json_field("passed", bool))
    mandatory: bool = field(metadata=json_field("mandatory", bool))
    detail: str = field(default="", metadata=json_field("detail", str, optional=True))

    def to_json(self) -> dict[str, Any]:
        return encode(self)


@dataclass(frozen=True)
class Check:
    """One quality check; build with the class methods."""

    kind: str  # "row" | "rows_between" | "null_fraction" | "schema" | "batch"
    name: str
    mandatory: bool = True
    expression: str | None = None
    low: float | None = None
    high: float | None = None
    column: str | None = None
    predicate: Callable[[Mapping[str, Any]], bool] | None = field(default=None, compare=False)

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def row(cls, expression: str, *, name: str | None = None) -> Check:
        if not isinstance(expression, str) or not expression.strip():
            raise ConfigError("Check.row takes a SQL predicate such as 'amount >= 0'", key="checks")
        return cls("row", name or expression, True, expression=expression)

    @classmethod
    def rows_between(cls, low: int | None = None, high: int | None = None, *, mandatory: bool = True, name: str | None = None) -> Check:
        return cls("rows_between", name or f"rows between {low} and {high}", mandatory, low=low, high=high)

    @classmethod
    def null_fraction(cls, column: str, *, at_most: float, mandatory: bool = True, name: str | None = None) -> Check:
        if not 0 <= at_most <= 1:
            raise ConfigError(f"null_fraction({column!r}) at_most must be within 0..1, got {at_most}", key="checks")
        return cls("null_fraction", name or f"null fraction of {column} <= {at_most}", mandatory, column=column, high=at_most)

    @classmethod
    def schema(cls, ddl: str, *, mandatory: bool = True, name: str | None = None) -> Check:
        return cls("schema", name or "schema", mandatory, expression=ddl)

    @classmethod
    def batch(cls, predicate: Callable[[Mapping[str, Any]], bool], *, name: str, mandatory: bool = True) -> Check:
        if not callable(predicate):
            raise ConfigError("Check.batch takes a callable receiving the batch metrics", key="checks")
        return cls("batch", name, mandatory, predicate=predicate)

    # -- evaluation --------------------------------------------------------------------------

    @property
    def row_level(self) -> bool:
        return self.kind == "row"

    def evaluate(self, metrics: Mapping[str, Any]) -> CheckResult:
        """A batch-level check against an output's metrics (``rows``, ``nulls``, ``schema``...)."""
        rows = int(metrics.get("rows") or 0)
        if self.kind == "rows_between":
            ok = (self.low is None or rows >= self.low) and (self.high is None or rows <= self.high)
            return CheckResult(self.name, ok, self.mandatory, f"{rows} rows")
        if self.kind == "null_fraction":
            nulls = int((metrics.get("nulls") or {}).get(self.column, 0))
            fraction = nulls / rows if rows else 0.0
            return CheckResult(self.name, fraction <= (self.high or 0.0), self.mandatory, f"{nulls}/{rows} null ({fraction:.4f})")
        if self.kind == "schema":
            expected = _ddl_fields(self.expression or "")
            actual = metrics.get("fields") or {}
            missing = {k: v for k, v in expected.items() if actual.get(k) != v}
            detail = (
                "matches"
                if not missing
                else "differs: " + ", ".join(f"{k} expected {v}, found {actual.get(k, 'nothing')}" for k, v in missing.items())
            )
            return CheckResult(self.name, not missing, self.mandatory, detail)
        if self.kind == "batch":
            try:
                ok = bool(self.predicate(metrics))  # type: ignore[misc]
                detail = ""
            except Exception as exc:  # a broken predicate fails its check, loudly recorded
                ok, detail = False, f"predicate raised {type(exc).__name__}: {exc}"
            return CheckResult(self.name, ok, self.mandatory, detail)
        raise ValueError(f"{self.kind} is a row-level check")


def _ddl_fields(ddl: str) -> dict[str, str]:
    """``"a LONG, b STRING"`` -> ``{"a": "bigint", "b": "string"}`` (Spark's simpleString names)."""
    aliases = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint", "bool": "boolean"}
    out = {}
    for part in ddl.split(","):
        bits = part.strip().split()
        if len(bits) >= 2:
            kind = bits[1].lower()
            out[bits[0]] = aliases.get(kind, kind)
    return out


def row_checks(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.row_level]


def batch_checks(checks: list[Check]) -> list[Check]:
    return [c for c in checks if not c.row_level]


def mandatory_failures(results: list[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.mandatory and not r.passed]
