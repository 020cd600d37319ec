"""The model a program's tables are checked against, and what a failed check is.

The model is the set of records the system acknowledged, by unique id:

* ``ack`` - every record any reader has seen in the table: once visible it must stay visible,
  once (a batch is visible only after its commit is decided, so nothing seen may vanish);
* ``settled`` - after a query ran to the end of its input without an error, every eligible
  record its sources held must be there (``must_have``);
* ``lost_ok`` - records that may legitimately never arrive: Kafka records expired before any
  query read them, records of a deleted topic nobody read, a gap skipped on purpose;
* eligibility - a record the query's own filter drops must never be in the table.

A refused action promised that nothing was written: the table must read as before it
(``unchanged``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.explorer.world import Record, World, passes_filter

#: which records a table receives (None: all)
Routed = Callable[[Record], bool] | None


@dataclass(frozen=True)
class Failure:
    """A check that failed: ``kind`` and ``reader`` make its signature (what the shrinker keeps)."""

    kind: str
    reader: str
    detail: str
    step: int = 0

    @property
    def signature(self) -> str:
        return f"{self.kind}:{self.reader}"

    def describe(self) -> str:
        return f"step {self.step}: {self.kind} ({self.reader}): {self.detail}"


def _sample(ids: set[str] | list[str], n: int = 6) -> str:
    items = sorted(ids)
    return ", ".join(items[:n]) + (f" ... ({len(items)})" if len(items) > n else "")


@dataclass
class Model:
    world: World
    filter: bool = False
    #: per table, every id a reader has seen there (with its quarantine tables)
    acks: dict[str, set[str]] = field(default_factory=dict)
    lost_ok: set[str] = field(default_factory=set)
    settled: bool = False
    #: rate records whose batch Spark committed (must be there once settled)
    rate_committed: set[str] = field(default_factory=set)
    #: foreign rows (pre-existing files) readers must keep seeing
    foreign_kept: bool = True

    @property
    def ack(self) -> set[str]:
        """Every id seen in any table."""
        return set().union(*self.acks.values()) if self.acks else set()

    def eligible(self, record: Record) -> bool:
        if record.source == "foreign":
            return self.foreign_kept
        return not self.filter or passes_filter(record.v)

    def must_have(self, routed: Routed = None) -> set[str]:
        out = set()
        for r in self.world.records.values():
            if not self.eligible(r) or r.id in self.lost_ok or (routed is not None and not routed(r)):
                continue
            if r.source == "rate" and r.id not in self.rate_committed:
                continue
            out.add(r.id)
        return out

    def check(
        self, reader: str, counts: Counter, step: int, *, table: str = "table", routed: Routed = None, complete: bool | None = None
    ) -> list[Failure]:
        """One reader's view of a table's latest state (with its quarantine tables) against the model."""
        failures = []
        dups = {i: c for i, c in counts.items() if c > 1}
        if dups:
            failures.append(Failure("duplicate", reader, f"{len(dups)} ids read more than once: {_sample(list(dups))}", step))
        unknown = {i for i in counts if i not in self.world.records}
        if unknown:
            failures.append(Failure("unknown-row", reader, f"ids no source produced: {_sample(unknown)}", step))
        ineligible = {i for i in counts if i in self.world.records and not self.eligible(self.world.records[i])}
        if ineligible:
            failures.append(Failure("filtered-row", reader, f"rows the query's filter drops: {_sample(ineligible)}", step))
        misrouted = {i for i in counts if i in self.world.records and routed is not None and not routed(self.world.records[i])}
        if misrouted:
            failures.append(Failure("misrouted-row", reader, f"rows of other tables: {_sample(misrouted)}", step))
        lost = self.acks.get(table, set()) - set(counts)
        if lost:
            failures.append(Failure("lost", reader, f"{len(lost)} rows seen earlier are gone: {_sample(lost)}", step))
        if self.settled if complete is None else complete:
            missing = self.must_have(routed) - set(counts)
            if missing:
                failures.append(Failure("missing", reader, f"{len(missing)} acknowledged records never written: {_sample(missing)}", step))
        return failures

    def check_subset(self, reader: str, counts: Counter, step: int, routed: Routed = None) -> list[Failure]:
        """A past state of the table (time travel, a Delta version, an Iceberg snapshot): each row
        once, and only rows the table may hold."""
        failures = []
        dups = {i: c for i, c in counts.items() if c > 1}
        if dups:
            failures.append(Failure("duplicate", reader, f"{len(dups)} ids read more than once: {_sample(list(dups))}", step))
        bad = {i for i in counts if i not in self.world.records or not self.eligible(self.world.records[i])}
        bad |= {i for i in counts if i in self.world.records and routed is not None and not routed(self.world.records[i])}
        if bad:
            failures.append(Failure("unknown-row", reader, f"rows the table may not hold: {_sample(bad)}", step))
        return failures

    def observe(self, table: str, counts: Counter) -> None:
        """What a reader saw is acknowledged from now on."""
        self.acks.setdefault(table, set()).update(counts)


def compare(reader: str, got: Counter, want: Counter, step: int, kind: str = "disagree") -> list[Failure]:
    if got == want:
        return []
    missing, extra = set(want) - set(got), set(got) - set(want)
    counts = {i for i in set(got) & set(want) if got[i] != want[i]}
    detail = f"missing {_sample(missing)}; extra {_sample(extra)}; other counts {_sample(counts)}"
    return [Failure(kind, reader, detail, step)]
