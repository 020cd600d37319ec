"""Where the exactly-once audit's verdict reaches the metrics and the lineage events.

``seo audit`` saves its verdict in the table (``_seo/audit``, ``table.audit_mark``);
``audit_verdict`` reads it (``mark_verdict``), so ``seo_audit_passed`` and the lineage facet's
``auditVerdict`` show the latest audit - absent / null while none ran. The alert rule
``SeoAuditFailed`` and the dashboard's audit panel read the metric. ``register_audit_reader``
replaces the reader (tests; a deployment that keeps verdicts elsewhere).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..storage.base import Storage
from ..table.audit_mark import read_mark

log = logging.getLogger("streaming_exactly_once.observability")


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


def mark_verdict(storage: Storage) -> AuditVerdict | None:
    """The verdict ``seo audit`` last saved in the table at ``storage`` (None: no audit ran)."""
    mark = read_mark(storage)
    if mark is None:
        return None
    batch = mark.latest_batch_id if mark.passed else mark.audited_to
    return AuditVerdict(mark.passed, mark.time_ms / 1000, batch, mark.detail)


def _table_verdict(table: str) -> AuditVerdict | None:
    from ..storage import open_storage

    try:
        return mark_verdict(open_storage(table))
    except Exception as exc:  # noqa: BLE001 - a verdict that cannot be read is no verdict
        log.debug("reading the audit verdict of %s failed: %s", table, exc)
        return None


def audit_verdict(table: str) -> AuditVerdict | None:
    """The latest audit verdict on ``table``, or None (none ran, or it cannot be read)."""
    reader = _reader
    return _table_verdict(table) if reader is None else reader(table)
