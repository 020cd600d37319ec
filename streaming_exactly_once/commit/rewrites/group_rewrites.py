"""A dataset group's compaction: one ``TableRewrites`` per dataset table of the group, staged
under the group's root (``commit.rewrites.table_rewrites`` says why there), and when each is planned,
published, forgotten and stopped. ``commit.groups.group_committer`` owns one."""

from __future__ import annotations

import threading
from collections.abc import MutableMapping

from ...manifest.manifest_log import ManifestLog
from ...storage.base import Storage
from ...table.group_state import is_quarantine
from ...table.table_logs import TableLogs
from ..background.housekeeping import Housekeeping
from .data_compaction import CompactionPolicy
from .table_rewrites import BatchRewrites, TableRewrites


class GroupRewrites:
    """Each dataset table's rewrites (quarantine tables have none)."""

    def __init__(self, storage: Storage, housekeeping: Housekeeping, policy: CompactionPolicy, *, interval: int, retention_ms: int | None) -> None:
        self.storage = storage
        self.housekeeping = housekeeping
        self.policy = policy
        self.interval = interval
        self.retention_ms = retention_ms
        self._lock = threading.Lock()
        self._tables: dict[str, TableRewrites] = {}
        self._planned: set[str] = set()  # tables planned since the last recovery
        self._stopping = False  # ``close`` began: no table's rewrites start any more

    def get(self, table: str) -> TableRewrites | None:
        """The table's rewrites, created at first use (None: a quarantine table, or stopping)."""
        if is_quarantine(table):
            return None
        with self._lock:
            if self._stopping:
                return None
            rewrites = self._tables.get(table)
            if rewrites is None:
                rewrites = TableRewrites(self.storage.child(table), self.housekeeping, self.policy, staging=self.storage, table=table)
                self._tables[table] = rewrites
        return rewrites

    def start(self, tables: list[str], next_group_batch: int) -> None:
        """At a writer's start: plan every table's next compaction batch, on the rewrite lane,
        from a listing read there (the committer's cached tables are its thread's alone)."""
        self._stopping = False
        self.housekeeping.queue_rewrite(lambda: self._plan_at_start(tables, next_group_batch), key="rewrite-start")

    def _plan_at_start(self, tables: list[str], next_group_batch: int) -> None:
        for table in tables:
            rewrites = self.get(table)
            if rewrites is None:
                continue
            logs = TableLogs.open(self.storage.child(table), interval=self.interval, retention_ms=self.retention_ms, kind="member")
            manifest = logs.require_manifest()
            latest = manifest.latest_batch_id(refresh=True)
            rewrites.plan(manifest, -1 if latest is None else latest, start=True, staging_batch=next_group_batch)

    def after_batch(self, table: str, manifest: ManifestLog, latest: int, next_group_batch: int) -> None:
        """After the table's batch ``latest``: plan its next compaction batch if that is next
        (or at its first batch since a recovery, whichever batch that is)."""
        rewrites = self.get(table)
        if rewrites is not None:
            start = table not in self._planned
            self._planned.add(table)
            rewrites.plan(manifest, latest, start=start, staging_batch=next_group_batch)

    def for_batch(self, table: str, manifest: ManifestLog, batch_id: int, timings: MutableMapping[str, float]) -> BatchRewrites:
        """What the table's batch ``batch_id`` publishes (checked before the claim)."""
        rewrites = self.get(table)
        return BatchRewrites(table=table) if rewrites is None else rewrites.for_batch(manifest, batch_id, timings)

    def forget(self) -> None:
        """Before a recovery, which deletes their staging directories."""
        with self._lock:
            tables = list(self._tables.values())
            self._planned.clear()
        for rewrites in tables:
            rewrites.forget()

    def close(self, *, discard: bool) -> None:
        """A stopping writer: no preparation writes more, and (``discard``) what they prepared is deleted."""
        with self._lock:
            self._stopping = True  # the start plan may still be creating tables' rewrites: no more
            tables = list(self._tables.values())
        for rewrites in tables:
            rewrites.stop()
        self.housekeeping.drain()
        with self._lock:  # every one: those created before the flag was seen included
            tables = list(self._tables.values())
        for rewrites in tables:
            rewrites.stop()
            if discard:
                rewrites.discard()
