"""The state of a dataset group: per table, its latest batch and watermarks; per source partition,
its offsets - carried forward from batch to batch in the group's commit records.

Why carried forward: a dataset that is absent from a batch must keep its state (a known pitfall
of incremental-ingestion frameworks is a skipped dataset resetting its watermark). The newest
commit record alone holds the state of *every* table, so nothing scans history to find it.

One table's entry (JSON, inside the ``datasets`` map of ``_seo/commits/G``)::

    "orders": {"batchId":5,"lastGroupBatch":7,"rows":1200,"status":"committed",
               "watermarks":{"ts":{"low":"2024-01-01T00:05:00","high":"2024-01-01T00:09:59",
                                   "batchMin":"2024-01-01T00:05:01","batchMax":"2024-01-01T00:09:59"}},
               "expectedHigh":{"orders/0":180},
               "checks":[{"name":"rows between 1 and None","passed":true,"mandatory":true,"detail":"200 rows"}]}

* ``low`` is the previous batch's ``high`` (Gobblin's low watermark), ``high`` the highest value
  committed so far (the actual high watermark), ``batchMin``/``batchMax`` this table's last batch.
* ``expectedHigh``: the end offsets the *source* gave for this dataset's partitions (Kafka-style
  sources whose topic is the dataset key), so a consumer can tell "caught up" from "behind".
* ``status``: ``committed``; ``rejected`` (a mandatory check failed: the batch went to
  ``_quarantine/batches/<table>`` and the watermarks did not move); ``quarantined`` (every row
  of the batch failed a row check). ``quarantinedRows``/``rejectedRows`` count what went aside.

Source partitions (``sourcePartitions``; source index -> ``topic/partition`` -> offsets)::

    {"0":{"orders/0":{"low":120,"high":180},"orders/1":{"low":95,"high":130}}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..log.version import loads_line

#: Where a group keeps what its checks set aside: ``rows/<table>`` (rows that failed a row
#: check) and ``batches/<table>`` (batches a mandatory batch check rejected).
QUARANTINE_DIR = "_quarantine"
QUARANTINE_ROWS = f"{QUARANTINE_DIR}/rows"
QUARANTINE_BATCHES = f"{QUARANTINE_DIR}/batches"
#: The state entry that maps each quarantine table to its latest batch (no dataset is named so:
#: dataset directory names never start with ``_``).
QUARANTINE_KEY = QUARANTINE_DIR


def is_quarantine(table: str) -> bool:
    return table.startswith(QUARANTINE_DIR + "/")


def split_state(state: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """(per dataset table: its entry, per quarantine table: its latest batch)."""
    datasets = {k: v for k, v in state.items() if k != QUARANTINE_KEY}
    return datasets, dict(state.get(QUARANTINE_KEY, {}))


@dataclass
class TableBatch:
    """What one table of the group got in one group batch (input to ``advance``)."""

    table: str
    status: str  # "committed" | "rejected" | "quarantined" (every row failed a row check)
    batch_id: int  # the table's own batch id (of the table written: the quarantine one if rejected)
    rows: int
    files: int
    bytes: int
    watermarks: dict[str, dict[str, Any]] = field(default_factory=dict)  # col -> {"min":..,"max":..}
    checks: list[dict[str, Any]] = field(default_factory=list)
    quarantined_rows: int = 0  # rows of this table that failed a row check in this batch


def _newer(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    try:
        return b if b > a else a
    except TypeError:  # mixed types after a schema change: the newer batch's value wins
        return b


def advance(
    state: Mapping[str, dict[str, Any]],
    batches: list[TableBatch],
    group_batch: int,
    expected: Mapping[str, dict[str, int]] | None = None,
) -> dict[str, dict[str, Any]]:
    """The state after a group batch: tables in ``batches`` move on, every other one is kept."""
    out = {name: dict(entry) for name, entry in state.items()}
    for b in batches:
        prev = out.get(b.table, {})
        entry = dict(prev)
        entry["lastGroupBatch"] = group_batch
        entry["status"] = b.status
        entry["checks"] = b.checks
        if b.status == "committed":
            entry["batchId"] = b.batch_id
            entry["rows"] = int(prev.get("rows", 0)) + b.rows
            marks = dict(prev.get("watermarks", {}))
            for column, mm in b.watermarks.items():
                old = marks.get(column, {})
                marks[column] = {
                    "low": old.get("high"),
                    "high": _newer(old.get("high"), mm.get("max")),
                    "batchMin": mm.get("min"),
                    "batchMax": mm.get("max"),
                }
            entry["watermarks"] = marks
        elif b.status == "rejected":
            entry["rejectedRows"] = int(prev.get("rejectedRows", 0)) + b.rows
            entry.setdefault("watermarks", {})
        else:  # "quarantined": nothing of the table itself this batch
            entry.setdefault("watermarks", {})
        if b.quarantined_rows or "quarantinedRows" in prev:
            entry["quarantinedRows"] = int(prev.get("quarantinedRows", 0)) + b.quarantined_rows
        if expected and b.table in expected:
            entry["expectedHigh"] = dict(expected[b.table])
        out[b.table] = entry
    return out


def source_partitions(source_offsets: tuple[str | None, ...] | list[str | None]) -> dict[str, dict[str, int]]:
    """Per source index, ``topic/partition`` -> end offset, from a batch's offsets JSON.

    Only offsets shaped like Kafka's (``{"topic":{"0":120,"1":95}}``) have partitions; other
    sources (files, rate) give nothing here.
    """
    out: dict[str, dict[str, int]] = {}
    for index, text in enumerate(source_offsets):
        if not text:
            continue
        try:
            obj = loads_line(text)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        parts: dict[str, int] = {}
        for topic, partitions in obj.items():
            if not isinstance(partitions, dict):
                parts = {}
                break
            for partition, offset in partitions.items():
                if isinstance(offset, int) and not isinstance(offset, bool):
                    parts[f"{topic}/{partition}"] = offset
        if parts:
            out[str(index)] = parts
    return out


def advance_sources(previous: Mapping[str, Any] | None, ends: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    """Source partition offsets after a batch: ``low`` = the previous ``high``; absent partitions kept."""
    out = {src: {p: dict(v) for p, v in parts.items()} for src, parts in (previous or {}).items()}
    for src, parts in ends.items():
        current = out.setdefault(src, {})
        for partition, end in parts.items():
            old = current.get(partition, {})
            current[partition] = {"low": old.get("high"), "high": end}
    return out


def expected_by_dataset(ends: Mapping[str, Mapping[str, int]], datasets: list[str]) -> dict[str, dict[str, int]]:
    """Source partitions whose topic names a dataset: that dataset's expected high watermark."""
    wanted = set(datasets)
    out: dict[str, dict[str, int]] = {}
    for parts in ends.values():
        for partition, end in parts.items():
            topic = partition.rsplit("/", 1)[0]
            if topic in wanted:
                out.setdefault(topic, {})[partition] = end
    return out


def starting_offsets(partitions: Mapping[str, Any], source: int = 0) -> str | None:
    """Kafka ``startingOffsets`` JSON that resumes after the last committed batch of a source."""
    parts = partitions.get(str(source))
    if not parts:
        return None
    out: dict[str, dict[str, int]] = {}
    for key, offsets in parts.items():
        topic, _, partition = key.rpartition("/")
        out.setdefault(topic, {})[partition] = int(offsets["high"])
    return json.dumps(out, sort_keys=True, separators=(",", ":"))
