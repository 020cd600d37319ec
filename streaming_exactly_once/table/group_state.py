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

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ..log.codec import field as field_value
from ..log.record_fields import decode, encode, json_field, json_names, json_object

#: Where a group keeps what its checks set aside: ``rows/<table>`` (rows that failed a row
#: check) and ``batches/<table>`` (batches a mandatory batch check rejected).
QUARANTINE_DIR = "_quarantine"
QUARANTINE_ROWS = f"{QUARANTINE_DIR}/rows"
QUARANTINE_BATCHES = f"{QUARANTINE_DIR}/batches"
#: The state entry that maps each quarantine table to its latest batch (no dataset is named so:
#: dataset directory names never start with ``_``).
QUARANTINE_KEY = QUARANTINE_DIR


def _opt(name: str, kind: type) -> Mapping[str, Any]:
    return json_field(name, kind, optional=True, omit_default=True)


def is_quarantine(table: str) -> bool:
    return table.startswith(QUARANTINE_DIR + "/")


def split_state(state: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """(per dataset table: its entry, per quarantine table: its latest batch) of a state as
    stored, unchecked - for the maintenance commands that must report a damaged state, not
    fail on it (``maintenance.group_tables``). Everything else reads ``GroupState``."""
    datasets = {k: v for k, v in state.items() if k != QUARANTINE_KEY}
    return datasets, dict(state.get(QUARANTINE_KEY, {}))


_R = TypeVar("_R")


def _as_stored(record: _R, obj: Mapping[str, Any]) -> _R:
    """``record``, remembering the JSON object it was read from (its ``stored`` field)."""
    object.__setattr__(record, "stored", dict(obj))
    return record


#: The JSON object a state object was read from, written back unchanged while the object is
#: (``advance`` replaces what a batch changes; ``dataclasses.replace`` does not copy this
#: field). That is how the state was always carried forward - an object a batch does not touch
#: keeps its bytes, keys a newer release added and keys stored as null included.
def _stored() -> Any:
    return field(default=None, init=False, compare=False, repr=False)


@dataclass(frozen=True)
class ColumnWatermark:
    """One watermark column of a table: ``low``/``high`` and this table's last batch min/max
    (any JSON value: the column's values as JSON, null when unknown)."""

    low: Any = field(default=None, metadata=json_field("low", object, optional=True))
    high: Any = field(default=None, metadata=json_field("high", object, optional=True))
    batch_min: Any = field(default=None, metadata=json_field("batchMin", object, optional=True))
    batch_max: Any = field(default=None, metadata=json_field("batchMax", object, optional=True))
    stored: Mapping[str, Any] | None = _stored()

    def to_json(self) -> dict[str, Any]:
        return dict(self.stored) if self.stored is not None else encode(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ColumnWatermark:
        return _as_stored(decode(cls, obj), obj)


@dataclass(frozen=True)
class DatasetState:
    """One table's entry in the group state (the module docstring shows it). Every key is
    optional and left out when None.

    ``order`` is the order of the keys this entry was read with: the entry is written back with
    those keys first, in that order, and any new one after them in the field order - which is
    how the state's bytes were always made (a JSON object carried forward and updated), so a
    table rejected first and committed later keeps ``rejectedRows`` before ``batchId``."""

    last_group_batch: int | None = field(default=None, metadata=_opt("lastGroupBatch", int))
    status: str | None = field(default=None, metadata=_opt("status", str))
    checks: list[dict[str, Any]] | None = field(default=None, metadata=_opt("checks", list))
    batch_id: int | None = field(default=None, metadata=_opt("batchId", int))
    rows: int | None = field(default=None, metadata=_opt("rows", int))
    rejected_rows: int | None = field(default=None, metadata=_opt("rejectedRows", int))
    watermarks: dict[str, ColumnWatermark] | None = field(
        default=None, metadata=json_field("watermarks", dict, optional=True, omit_default=True, values=ColumnWatermark)
    )
    quarantined_rows: int | None = field(default=None, metadata=_opt("quarantinedRows", int))
    expected_high: dict[str, int] | None = field(default=None, metadata=_opt("expectedHigh", dict))
    order: tuple[str, ...] = field(default=(), compare=False)
    #: keys this release does not know (a newer one wrote them): carried forward as they are
    unknown: Mapping[str, Any] = field(default_factory=dict, compare=False)
    stored: Mapping[str, Any] | None = _stored()

    def to_json(self) -> dict[str, Any]:
        if self.stored is not None:
            return dict(self.stored)
        obj = {**self.unknown, **encode(self)}
        if self.watermarks is not None:
            obj["watermarks"] = {column: mark.to_json() for column, mark in self.watermarks.items()}
        first = {k: obj[k] for k in self.order if k in obj}
        return {**first, **{k: v for k, v in obj.items() if k not in first}}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DatasetState:
        known = json_names(cls)
        unknown = {k: v for k, v in obj.items() if k not in known}
        record = replace(decode(cls, obj), order=tuple(obj), unknown=unknown)
        if record.watermarks is not None:  # checked by decode: rebuilt to remember each column's JSON
            record = replace(record, watermarks={c: ColumnWatermark.from_json(v) for c, v in obj["watermarks"].items()})
        return _as_stored(record, obj)


@dataclass(frozen=True)
class PartitionOffsets:
    """One source partition's offsets: ``low`` the previous batch's end, ``high`` this one's."""

    low: int | None = field(metadata=json_field("low", int, optional=True))
    high: int = field(metadata=json_field("high", int))
    stored: Mapping[str, Any] | None = _stored()

    def to_json(self) -> dict[str, Any]:
        return dict(self.stored) if self.stored is not None else encode(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> PartitionOffsets:
        return _as_stored(decode(cls, obj), obj)


#: per source index (``"0"``), per ``topic/partition``: its offsets
SourceOffsets = Mapping[str, Mapping[str, PartitionOffsets]]


@dataclass(frozen=True)
class GroupState:
    """The state of a dataset group after its newest batch, as its commit record holds it:
    ``datasets`` (per dataset table its entry, plus the ``_quarantine`` map of quarantine tables
    to their latest batch, last) and ``sourcePartitions``."""

    tables: Mapping[str, DatasetState] = field(default_factory=dict)
    quarantine: Mapping[str, int] = field(default_factory=dict)
    sources: SourceOffsets = field(default_factory=dict)

    @classmethod
    def from_json(cls, datasets: Mapping[str, Any] | None, source_partitions: Mapping[str, Any] | None = None) -> GroupState:
        """The state a commit record's ``datasets`` and ``sourcePartitions`` hold (strict:
        ``RecordError`` naming the field)."""
        state = dict(datasets or {})
        quarantine = dict(field_value(state, QUARANTINE_KEY, dict, optional=True, default={}))
        for name in quarantine:
            field_value(quarantine, name, int)
        entries = {k: v for k, v in state.items() if k != QUARANTINE_KEY}
        sources = {
            src: {p: PartitionOffsets.from_json(json_object(v)) for p, v in json_object(parts).items()}
            for src, parts in (source_partitions or {}).items()
        }
        return cls({k: DatasetState.from_json(json_object(v)) for k, v in entries.items()}, quarantine, sources)

    def datasets_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: e.to_json() for name, e in self.tables.items()}
        if self.quarantine:
            out[QUARANTINE_KEY] = dict(self.quarantine)
        return out

    def sources_json(self) -> dict[str, Any]:
        return {src: {p: v.to_json() for p, v in parts.items()} for src, parts in self.sources.items()}

    def latest_batch(self, table: str) -> int:
        """The latest batch of ``table`` (a dataset or a quarantine table); -1 if none."""
        if is_quarantine(table):
            return self.quarantine.get(table, -1)
        entry = self.tables.get(table)
        return -1 if entry is None or entry.batch_id is None else entry.batch_id

    def table_names(self) -> list[str]:
        """Every table with a published batch: datasets with a batch id, quarantine tables."""
        return sorted({k for k, e in self.tables.items() if e.batch_id is not None} | set(self.quarantine))


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
    #: a batch of no data that only publishes the table's rewrites (``seo compact``'s): the
    #: table's entry moves only its ``batchId``; the rest (``lastGroupBatch`` included: the group
    #: batch its status and checks are about) describes its data and is kept
    maintenance: bool = False


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
    tables: Mapping[str, DatasetState],
    batches: list[TableBatch],
    group_batch: int,
    expected: Mapping[str, dict[str, int]] | None = None,
) -> dict[str, DatasetState]:
    """The tables' state after a group batch: tables in ``batches`` move on, every other one is kept."""
    out = dict(tables)
    for b in batches:
        prev = out.get(b.table, DatasetState())
        if b.maintenance:
            out[b.table] = replace(prev, batch_id=b.batch_id, order=tuple(prev.to_json()))
            continue
        # the keys it has keep their place; new ones follow (see ``DatasetState``)
        entry = replace(prev, last_group_batch=group_batch, status=b.status, checks=b.checks, order=tuple(prev.to_json()))
        if b.status == "committed":
            marks = dict(prev.watermarks or {})
            for column, mm in b.watermarks.items():
                old = marks.get(column, ColumnWatermark())
                marks[column] = ColumnWatermark(low=old.high, high=_newer(old.high, mm.get("max")), batch_min=mm.get("min"), batch_max=mm.get("max"))
            entry = replace(entry, batch_id=b.batch_id, rows=(prev.rows or 0) + b.rows, watermarks=marks)
        elif b.status == "rejected":
            entry = replace(entry, rejected_rows=(prev.rejected_rows or 0) + b.rows, watermarks=prev.watermarks or {})
        else:  # "quarantined": nothing of the table itself this batch
            entry = replace(entry, watermarks=prev.watermarks or {})
        if b.quarantined_rows or prev.quarantined_rows is not None:
            entry = replace(entry, quarantined_rows=(prev.quarantined_rows or 0) + b.quarantined_rows)
        if expected and b.table in expected:
            entry = replace(entry, expected_high=dict(expected[b.table]))
        out[b.table] = entry
    return out


def advance_sources(previous: SourceOffsets | None, ends: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, PartitionOffsets]]:
    """Source partition offsets after a batch: ``low`` = the previous ``high``; absent partitions kept."""
    out = {src: dict(parts) for src, parts in (previous or {}).items()}
    for src, parts in ends.items():
        current = out.setdefault(src, {})
        for partition, end in parts.items():
            old = current.get(partition)
            current[partition] = PartitionOffsets(low=None if old is None else old.high, high=end)
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
