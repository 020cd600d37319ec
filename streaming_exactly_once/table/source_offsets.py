"""Offsets of partitioned sources (Kafka and its kind): what a table has committed, per partition.

Spark keeps each batch's end offsets in its checkpoint (``offsets/N``); the sink copies them into
the table's offsets log (``table.offsets_log``). A source whose offsets are shaped like Kafka's -
``{"topic":{"0":120,"1":95}}``, partition -> the next offset to read - has partitions; other
sources (files, rate) have none and are left to their own mechanisms.

A table's *high-water mark* of a partition is the highest end offset any committed batch read
from it since the partition's offsets last restarted: every record below it was read by a
committed batch of some query (or deliberately skipped with ``allow_offset_gaps``). A topic
deleted and recreated numbers its records from 0 again; the batch that first writes such new
records records the partition in its ``offsetResets`` (``table.offsets_log``), and the mark then
counts only that batch and later ones (``table_marks``). ``check_start`` compares where a batch
starts with the mark:

* a start below the mark **overlaps** - records already in the table, dropped row by row;
* a start above the mark leaves a **gap** - records no batch ever read, an error unless allowed.

Partitions are named ``topic/partition`` across sources (a query's source order may change when
it is rebuilt; a topic's partitions do not).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..log.version import loads_line

#: ``topic/partition`` -> offset
PartitionOffsetMap = dict[str, int]


def source_partitions(source_offsets: Sequence[str | None]) -> dict[str, PartitionOffsetMap]:
    """Per source index, ``topic/partition`` -> end offset, from a batch's offsets JSON lines.

    Only offsets shaped like Kafka's have partitions; other sources give nothing here."""
    out: dict[str, PartitionOffsetMap] = {}
    for index, text in enumerate(source_offsets):
        parts = _partitions(text)
        if parts:
            out[str(index)] = parts
    return out


def _partitions(text: str | None) -> PartitionOffsetMap:
    if not text:
        return {}
    try:
        obj = loads_line(text)
    except ValueError:
        return {}
    if not isinstance(obj, dict):
        return {}
    parts: PartitionOffsetMap = {}
    for topic, partitions in obj.items():
        if not isinstance(partitions, dict):
            return {}
        for partition, offset in partitions.items():
            if isinstance(offset, int) and not isinstance(offset, bool):
                parts[f"{topic}/{partition}"] = offset
    return parts


def merged_ends(source_offsets: Sequence[str | None]) -> PartitionOffsetMap:
    """Every partitioned source's end offsets of one batch, merged (by partition name): a
    partition two sources read (one topic read twice) has been read up to the higher end."""
    out: PartitionOffsetMap = {}
    for parts in source_partitions(source_offsets).values():
        for name, offset in parts.items():
            out[name] = max(offset, out.get(name, offset))
    return out


def read_by_several(source_offsets: Sequence[str | None], previous: Sequence[str | None] | None) -> dict[str, int]:
    """Partitions more than one source of the batch read - one topic subscribed twice in one
    query (a union): each of its records reaches the batch once per source. A source read a
    partition when its end moved past its end in ``previous`` (the query's last committed
    batch's offsets, by source), or when there is none to compare with. Partition -> sources."""
    before = source_partitions(previous or [])
    counts: dict[str, int] = {}
    for index, parts in source_partitions(source_offsets).items():
        for name, end in parts.items():
            start = before.get(index, {}).get(name)
            if start is None or end > start:
                counts[name] = counts.get(name, 0) + 1
    return {name: n for name, n in counts.items() if n > 1}


def merged_starts(source_offsets: Iterable[str | None]) -> PartitionOffsetMap:
    """Where a batch starts in each partition, from its sources' start offsets: a partition two
    sources read starts at the lower of the two."""
    out: PartitionOffsetMap = {}
    for parts in source_partitions(list(source_offsets)).values():
        for name, offset in parts.items():
            out[name] = min(offset, out.get(name, offset))
    return out


def high_water(batches: Iterable[Sequence[str | None]]) -> PartitionOffsetMap:
    """The highest end offset per partition over the source offsets of ``batches``."""
    out: PartitionOffsetMap = {}
    for source_offsets in batches:
        raise_to(out, merged_ends(source_offsets))
    return out


def raise_to(marks: PartitionOffsetMap, ends: Mapping[str, int], resets: Collection[str] = ()) -> None:
    """Raise ``marks`` to ``ends`` where they are higher (a batch just committed); a partition in
    ``resets`` restarted its offsets in that batch: its mark is the batch's end, lower or not."""
    for name, offset in ends.items():
        if name in resets or offset > marks.get(name, -1):
            marks[name] = offset


class MarkRecord(Protocol):
    """What ``table_marks`` reads of an offsets record (``table.offsets_log.OffsetsRecord``)."""

    @property
    def batch_id(self) -> int: ...

    @property
    def source_offsets(self) -> Sequence[str | None]: ...

    @property
    def offset_resets(self) -> Mapping[str, int]: ...


def table_marks(records: Iterable[MarkRecord]) -> PartitionOffsetMap:
    """The table's high-water marks from its offsets records, any subset that holds each query's
    latest record (what a compact file keeps): per partition, the highest end of the batches at
    or after the partition's latest offset reset. A query carries its resets in each later
    record, so the result does not depend on which of its earlier records are left."""
    records = sorted(records, key=lambda r: r.batch_id)
    since: dict[str, int] = {}
    for record in records:
        for name, batch in record.offset_resets.items():
            since[name] = max(batch, since.get(name, batch))
    marks: PartitionOffsetMap = {}
    for record in records:
        for name, offset in merged_ends(record.source_offsets).items():
            if record.batch_id >= since.get(name, -1) and offset > marks.get(name, -1):
                marks[name] = offset
    return marks


def split_name(name: str) -> tuple[str, int]:
    topic, _, partition = name.rpartition("/")
    return topic, int(partition)


def kafka_json(offsets: Mapping[str, int], topics: Iterable[str] | None = None) -> str | None:
    """Kafka ``startingOffsets`` JSON for ``offsets`` (only ``topics``, if given); None if empty."""
    wanted = None if topics is None else set(topics)
    out: dict[str, dict[str, int]] = {}
    for name, offset in sorted(offsets.items(), key=lambda item: split_name(item[0])):
        topic, partition = split_name(name)
        if wanted is None or topic in wanted:
            out.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(out, separators=(",", ":")) if out else None


@dataclass(frozen=True)
class StartCheck:
    """How a batch's start offsets compare with the table's high-water marks."""

    #: partition -> (start, mark): records from ``start`` below ``mark`` are in the table already
    overlaps: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: partition -> (mark, start): records from ``mark`` below ``start`` were never read
    gaps: dict[str, tuple[int, int]] = field(default_factory=dict)


def check_start(start: Mapping[str, int], marks: Mapping[str, int]) -> StartCheck:
    """Compare ``start`` with ``marks`` partition by partition (one the table never read from
    is new: neither)."""
    overlaps: dict[str, tuple[int, int]] = {}
    gaps: dict[str, tuple[int, int]] = {}
    for name, offset in start.items():
        mark = marks.get(name)
        if mark is None or offset == mark:
            continue
        if offset < mark:
            overlaps[name] = (offset, mark)
        else:
            gaps[name] = (mark, offset)
    return StartCheck(overlaps, gaps)


def restarted(start: Mapping[str, int], end: Mapping[str, int], own_ends: Mapping[str, int]) -> set[str]:
    """Partitions whose offsets went back - a topic deleted and recreated, whose new records
    reuse its offsets: the batch ends below where it starts (Spark's source found the partition
    behind the offsets it had reached, and says so), or it starts below where the same query's
    last committed batch ended (``own_ends``: that batch's end offsets; within one checkpoint a
    partition's offsets never go back otherwise)."""
    out: set[str] = set()
    for name, stop in end.items():
        begin = start.get(name)
        if begin is None:
            continue
        if stop < begin or (name in own_ends and begin < own_ends[name]):
            out.add(name)
    return out


def describe(ranges: Mapping[str, tuple[int, int]], limit: int = 5) -> str:
    """``t/0 [10, 42)``, ... - the first ``limit`` partitions' ranges, for error messages."""
    items = sorted(ranges.items(), key=lambda item: split_name(item[0]))
    text = ", ".join(f"{name} [{low}, {high})" for name, (low, high) in items[:limit])
    return text + (f" and {len(items) - limit} more" if len(items) > limit else "")
