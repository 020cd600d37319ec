"""Where the exactly-once audit's verdict reaches the metrics and the lineage events.

The audit (``seo audit``) is not part of the library yet. When it is, it registers a reader of
a table's latest verdict with ``register_audit_reader``; until then ``audit_verdict`` answers
None, so ``seo_audit_passed`` stays absent and the lineage facet's ``auditVerdict`` is null.
The alert rule ``SeoAuditFailed`` and the dashboard's audit panel already read the metric.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class AuditVerdict:
    """An audit's verdict on a table: passed or not, when, up to which batch, and why not."""

    passed: bool
    #: Unix time of the verdict
    timestamp: float
    #: the table's last batch the audit covered
    batch_id: int | None = None
    #: what failed, for the lineage facet and the alert's description
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        return {"passed": self.passed, "timestamp": self.timestamp, "batchId": self.batch_id, "detail": self.detail}


#: table URI -> its latest verdict; set by ``register_audit_reader``
_reader: Callable[[str], AuditVerdict | None] | None = None


def register_audit_reader(reader: Callable[[str], AuditVerdict | None] | None) -> None:
    """The audit's hook: ``reader(table_uri)`` returns the table's latest verdict (None: no
    audit ran). ``None`` unregisters it."""
    global _reader
    _reader = reader


def audit_verdict(table: str) -> AuditVerdict | None:
    """The latest audit verdict on ``table``, or None (no audit registered, or none ran)."""
    reader = _reader
    return None if reader is None else reader(table)
