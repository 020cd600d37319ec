"""How far behind a query is: source lag per partition from Spark's progress, and event time.

Spark's progress of a Kafka source names, per topic and partition, the offset the last batch
read up to (``endOffset``) and the newest offset the source saw (``latestOffset``); their
difference is the records waiting. Other sources report no such per-partition offsets and get
no lag. Event time comes from the watermark columns' newest committed value (``watermarks`` of
a commit record, as ``sink.batch_metrics`` writes them: ISO text of Spark's local timestamps).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import date, datetime
from typing import Any


def _offsets(value: Any) -> Mapping[str, Any] | None:
    """A progress offset as a mapping (Spark writes it as JSON, some clients as its text)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, Mapping) else None


def source_lag(progress: Mapping[str, Any] | None) -> Iterator[tuple[str, str, int]]:
    """``(topic, partition, records behind)`` for every partition of the progress' sources that
    report both offsets per partition."""
    for source in (progress or {}).get("sources") or ():
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        if end is None or latest is None:
            continue
        for topic, partitions in latest.items():
            read = end.get(topic)
            if not isinstance(partitions, Mapping) or not isinstance(read, Mapping):
                continue
            for partition, newest in partitions.items():
                done = read.get(partition)
                if isinstance(newest, int) and isinstance(done, int) and done >= 0:
                    yield topic, str(partition), max(0, newest - done)


def event_time_seconds(value: Any) -> float | None:
    """A watermark column's value as Unix time, or None for what is not a time (a number, a
    string that is no ISO date-time). Naive times are the process' local time, as PySpark
    hands timestamps to Python."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day).timestamp()
    if not isinstance(value, str) or len(value) < 10 or value[4:5] != "-":
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def newest_event_times(watermarks: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Per watermark column, the newest event time committed (``max`` of a commit record's
    ``watermarks``), where it is a time."""
    out: dict[str, float] = {}
    for column, marks in watermarks.items():
        seconds = event_time_seconds(marks.get("max")) if isinstance(marks, Mapping) else None
        if seconds is not None:
            out[column] = seconds
    return out
