"""What ``seo verify`` found: each problem, and the report the checks of every table add to.

Its own module so that the checks in other modules (``iceberg_checks``, ``rewrite_checks``)
take a report without importing ``verify``, which calls them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..log.record_fields import encode, json_field


@dataclass
class Problem:
    severity: str = field(metadata=json_field("severity", str))  # "error" | "warning"
    kind: str = field(metadata=json_field("kind", str))
    path: str = field(metadata=json_field("path", str))
    detail: str = field(metadata=json_field("detail", str))

    def to_json(self) -> dict[str, Any]:
        return encode(self)


@dataclass
class VerifyReport:
    table: str
    latest_batch_id: int | None = None
    files: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)
    #: batches a pending claim completes at the next start (``in_flight``)
    in_flight: set[int] = field(default_factory=set)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def add(self, severity: str, kind: str, path: str, detail: str) -> None:
        self.problems.append(Problem(severity, kind, path, detail))

    def to_json(self) -> dict[str, Any]:
        """The ``seo verify --json`` report. Written by hand, not declared: a report, never read
        back, with computed members (``ok``, the error and warning counts) among the fields."""
        return {
            "table": self.table,
            "ok": self.ok,
            "latestBatchId": self.latest_batch_id,
            "files": self.files,
            "bytes": self.bytes,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "kinds": dict(sorted(Counter(p.kind for p in self.problems).items())),
            "problems": [p.to_json() for p in self.problems],
        }
