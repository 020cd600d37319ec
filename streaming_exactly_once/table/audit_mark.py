"""``_seo/audit``: how far ``seo audit`` got on a table and its last verdict.

Written by each ``seo audit`` run (replaced as a whole); read by the next run, which starts after
``auditedTo`` with the offsets marks it left (so its cost is the new batches', not the history's),
and by the metrics and lineage hooks (``seo_audit_passed``). Deleting it costs one full audit.
Bytes (the second line shown wrapped)::

    v1
    {"auditedTo":41,"ledgerFrom":0,"marks":{"orders/0":1200},"passed":true,"timeMs":1795313165300,
      "latestBatchId":41,"violations":0,"detail":"",
      "manifest":{"interval":10,"compact":39,"compactSize":48211,"compactMtimeMs":1795313165100,
      "after":[[40,1210,1795313165150],[41,1207,1795313165290]]},"recheck":[]}

``auditedTo``: the last batch up to which every batch passed (-1: none yet); ``marks``: per
``topic/partition`` the end of the offsets written up to it; ``ledgerFrom``: the first batch with
a ledger (null: none seen yet); ``passed``/``violations``/``detail``: the verdict of the run.
``manifest`` (optional; absent in marks of older runs, null when the table has none): the
manifest's compact interval and its newest compact file at ``latestBatchId`` (batch id or null,
size, mtime). The next run probes for new batches from ``latestBatchId`` instead of listing the
manifest, and reads the whole live listing only when that compact file changed
(``maintenance.audit_scope``). ``after`` (optional, absent in older marks): ``[batch, size,
mtimeMs]`` of each manifest batch file after that compact file; the next run checks an audited
one again when its file changed (an entry added by hand after its audit). ``recheck``
(optional): such batches that failed that check, checked again by the next run until they pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..log.codec import RecordError
from ..log.record_file import encode_record, read_record
from ..storage.base import Storage
from .layout import AUDIT_FILE

VERSION = 1
HINT = "The audit mark only saves `seo audit` work; delete it and the next audit checks every batch."


@dataclass(frozen=True)
class ManifestSeen:
    """The manifest as an audit run left it: its interval and newest compact file."""

    interval: int
    compact: int | None
    compact_size: int | None = None
    compact_mtime_ms: int | None = None
    #: (batch, size, mtime) of each manifest batch file after the compact file
    after: tuple[tuple[int, int, int], ...] = ()

    def same_compact(self, other: ManifestSeen) -> bool:
        return (self.interval, self.compact, self.compact_size, self.compact_mtime_ms) == (
            other.interval,
            other.compact,
            other.compact_size,
            other.compact_mtime_ms,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "interval": self.interval,
            "compact": self.compact,
            "compactSize": self.compact_size,
            "compactMtimeMs": self.compact_mtime_ms,
            "after": [list(a) for a in self.after],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ManifestSeen:
        def opt(key: str) -> int | None:
            return None if obj.get(key) is None else int(obj[key])

        return cls(
            interval=int(obj["interval"]),
            compact=opt("compact"),
            compact_size=opt("compactSize"),
            compact_mtime_ms=opt("compactMtimeMs"),
            after=tuple((int(b), int(size), int(mtime)) for b, size, mtime in obj.get("after", [])),
        )


@dataclass(frozen=True)
class AuditMark:
    audited_to: int
    ledger_from: int | None
    marks: dict[str, int] = field(default_factory=dict)
    passed: bool = True
    time_ms: int = 0
    latest_batch_id: int | None = None
    violations: int = 0
    detail: str = ""
    manifest: ManifestSeen | None = None
    #: audited batches whose changed manifest file failed its re-check: checked again next run
    recheck: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "auditedTo": self.audited_to,
            "ledgerFrom": self.ledger_from,
            "marks": dict(sorted(self.marks.items())),
            "passed": self.passed,
            "timeMs": self.time_ms,
            "latestBatchId": self.latest_batch_id,
            "violations": self.violations,
            "detail": self.detail,
            "manifest": None if self.manifest is None else self.manifest.to_json(),
            "recheck": list(self.recheck),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> AuditMark:
        try:
            return cls(
                audited_to=int(obj["auditedTo"]),
                ledger_from=None if obj.get("ledgerFrom") is None else int(obj["ledgerFrom"]),
                marks={str(k): int(v) for k, v in obj.get("marks", {}).items()},
                passed=bool(obj["passed"]),
                time_ms=int(obj.get("timeMs", 0)),
                latest_batch_id=None if obj.get("latestBatchId") is None else int(obj["latestBatchId"]),
                violations=int(obj.get("violations", 0)),
                detail=str(obj.get("detail", "")),
                manifest=None if obj.get("manifest") is None else ManifestSeen.from_json(obj["manifest"]),
                recheck=tuple(int(b) for b in obj.get("recheck", [])),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RecordError(f"not an audit mark: {exc!r}") from None


def read_mark(storage: Storage) -> AuditMark | None:
    return read_record(storage, AUDIT_FILE, AuditMark.from_json, hint=HINT, version=VERSION)


def write_mark(storage: Storage, mark: AuditMark) -> None:
    storage.atomic_write(AUDIT_FILE, encode_record(mark.to_json(), version=VERSION))
