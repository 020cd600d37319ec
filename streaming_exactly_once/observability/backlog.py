"""The small-file backlog of a table: its live data files and those compaction would rewrite.

Read from the table's manifest as any reader reads it (no lock, nothing written), by the
metrics exporter's thread at most once a minute - never by a batch. "Awaiting compaction" is
what ``commit.rewrites.data_compaction`` calls small: Parquet files under half the target size, whether
compaction is on or not (age and quiet-period rules aside), so the metric shows the backlog
that turning it on, or ``seo compact``, would clear.
"""

from __future__ import annotations

from ..commit.rewrites.data_compaction import CompactionPolicy
from ..storage.base import Storage
from ..table.identity import read_identity
from ..table.table_logs import TableLogs


def small_file_backlog(storage: Storage, policy: CompactionPolicy | None = None) -> tuple[int, int] | None:
    """``(live data files, files awaiting compaction)`` of the table at ``storage``; None for a
    dataset group's root (its tables each have their own manifest) or a table with none yet."""
    identity = read_identity(storage)
    if identity is None or identity.kind == "group":
        return None
    manifest = TableLogs.for_identity(storage, identity).require_manifest()
    small = (policy or CompactionPolicy()).target_size // 2
    live = awaiting = 0
    for entry in manifest.files():
        live += 1
        if entry.size < small and entry.uri.endswith(".parquet"):
            awaiting += 1
    return live, awaiting
