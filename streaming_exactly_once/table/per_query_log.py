"""A compactible log whose compact files keep only the latest record of each query.

The offsets and commits logs hold one record per manifest batch, each tagged with the query
(checkpoint) that produced it. What readers of the *current* state need is the last record of
every query - Spark batch ids only grow within a query - so a compact file folds the history
down to one line per query instead of growing with every batch; per-batch records remain
readable from their delta files for as long as retention keeps them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Generic, Protocol, TypeVar

from ..log.compactible_log import CompactibleLog


class QueryRecord(Protocol):
    """A record of one manifest batch, tagged with the query and Spark batch that produced it."""

    @property
    def batch_id(self) -> int: ...

    @property
    def query_id(self) -> str: ...

    @property
    def spark_batch_id(self) -> int: ...


R = TypeVar("R", bound=QueryRecord)


class PerQueryLog(CompactibleLog[R], Generic[R]):
    """A compactible log of ``QueryRecord`` records."""

    fold_is_concatenation = False

    def fold(self, previous: Iterable[R], new: Sequence[R], now: int) -> list[R]:
        latest: dict[str, R] = {}
        for record in list(previous) + list(new):
            if record.query_id in latest:  # re-insert: the dict keeps the order of last records
                del latest[record.query_id]
            latest[record.query_id] = record
        return list(latest.values())

    def record(self, batch_id: int) -> R | None:
        """The record of manifest batch ``batch_id`` (from its delta or compact file)."""
        records = self.get(batch_id)
        if records is None:
            return None
        own = [r for r in records if r.batch_id == batch_id]
        return own[-1] if own else None

    def find(self, query_id: str, spark_batch_id: int, *, newest: int | None = None, depth: int = 64) -> R | None:
        """The record of Spark batch ``spark_batch_id`` of ``query_id``, searched from the newest
        batch down through at most ``depth`` batch files (metrics of recent batches; nothing on
        the commit path calls this)."""
        top = self.latest_batch_id(refresh=True) if newest is None else newest
        if top is None:
            return None
        for batch_id in range(top, max(-1, top - depth), -1):
            records = self.get(batch_id)
            for record in records or ():
                if record.query_id == query_id and record.spark_batch_id == spark_batch_id:
                    return record
        return None

    def latest_per_query(self) -> dict[str, R]:
        """The last record of every query the table has seen (compact file + deltas)."""
        latest: dict[str, R] = {}
        for record in self.all_records():
            current = latest.get(record.query_id)
            if current is None or record.batch_id >= current.batch_id:
                latest[record.query_id] = record
        return latest
