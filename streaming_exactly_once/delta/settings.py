"""The Delta log's settings of a ``format="delta"`` table, and the app id its commits carry."""

from __future__ import annotations

import re
from dataclasses import dataclass, field as dc_field

from ..log.record_fields import json_field

APP_ID_PREFIX = "streaming-exactly-once:"


#: Seconds of each unit a Delta ``interval`` property may name (``interval 30 days``).
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
_INTERVAL = re.compile(r"^\s*(?:interval\s+)?(\d+)\s*(second|minute|hour|day|week)s?\s*$", re.IGNORECASE)


def retention_seconds(value: str | None) -> float | None:
    """A Delta interval property (``delta.logRetentionDuration``) in seconds; None if unset or in
    a form not read here (the caller then assumes nothing of it)."""
    found = _INTERVAL.match(value or "")
    return None if found is None else int(found.group(1)) * _UNIT_SECONDS[found.group(2).lower()]


#: Longest time between two expired-log cleanups of one writer (``cleanup_due``).
CLEANUP_PERIOD_S = 3600.0


def cleanup_due(config: dict[str, str], cleaned_at: float | None, now: float) -> bool:
    """Whether a checkpoint is also the time for the expired-log cleanup: at the first one of
    this process (``cleaned_at`` None), then once ``CLEANUP_PERIOD_S`` (or the table's log
    retention, if shorter) has passed. The cleanup lists the whole log and deletes only what the
    retention expired: a log retained for 30 days gains nothing from running it every few seconds."""
    if str(config.get("delta.enableExpiredLogCleanup", "true")).lower() == "false":
        return False
    if cleaned_at is None:
        return True
    retention = retention_seconds(config.get("delta.logRetentionDuration"))
    period = CLEANUP_PERIOD_S if retention is None else min(CLEANUP_PERIOD_S, retention)
    return now - cleaned_at >= period


def app_id(table_id: str) -> str:
    """The Delta application id of the table with this identity (``table.identity``)."""
    return APP_ID_PREFIX + table_id


@dataclass(frozen=True)
class DeltaSettings:
    """Table properties set when the first batch creates the table (plain values, see the sink)."""

    #: delta.checkpointInterval: log replay reads at most this many JSON files
    checkpoint_interval: int = dc_field(default=10, metadata=json_field("checkpointInterval", int, optional=True))
    #: delta.logRetentionDuration (None: Delta's default, 30 days)
    log_retention_ms: int | None = dc_field(default=None, metadata=json_field("logRetentionMs", int, optional=True, omit_default=True))

    def table_properties(self) -> dict[str, str]:
        props = {"delta.checkpointInterval": str(self.checkpoint_interval)}
        if self.log_retention_ms is not None:
            props["delta.logRetentionDuration"] = f"interval {max(1, self.log_retention_ms // 1000)} seconds"
        return props
