"""``gc``: delete what no reader can see and no writer still needs - never an in-flight batch.

Deleted (or, with ``dry_run``, only listed):
* **orphan data files**: in the table, outside ``_``/``.`` directories, named by *no* retained
  manifest file (so no snapshot, not even a time-travel one, can read them), and older than
  ``older_than`` - which is what keeps a batch being written right now (its files are young, and
  in direct mode named by an intent) out of reach;
* **stale staging directories**: no WAL entry refers to them and nothing in them is younger than
  ``older_than`` (an attempt that died; its intents' data files go with it);
* indexes of compact files that retention has deleted.

Listing the table is O(files); this is a maintenance command, not part of any commit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..commit.recovery import INTENTS_SUBDIR, abort_attempt
from ..commit.wal import CommitSequenceStore
from ..manifest.manifest_index import delete_stale_indexes
from ..manifest.manifest_log import ManifestLog
from ..storage.base import Storage
from ..table.layout import STAGING_DIR, is_hidden
from .verify import referenced_relative_paths


@dataclass
class GcReport:
    dry_run: bool
    orphans: list[tuple[str, int]] = field(default_factory=list)
    staging: list[str] = field(default_factory=list)
    young_skipped: int = 0

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.orphans)


def collect_garbage(storage: Storage, *, older_than_ms: int = 3_600_000, dry_run: bool = False, now_ms: int | None = None) -> GcReport:
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now - older_than_ms
    report = GcReport(dry_run=dry_run)
    referenced = referenced_relative_paths(storage)
    wal = CommitSequenceStore(storage)
    live_staging = set()
    for batch_id in wal.pending():
        seq = wal.get(batch_id)
        if seq is not None:
            live_staging.add(seq.staging_dir)
    intents: set[str] = set()
    for entry in storage.list_dir(STAGING_DIR):
        for intent in storage.list_dir(f"{entry.path}/{INTENTS_SUBDIR}"):
            try:
                intents.add(storage.read_bytes(intent.path).decode("utf-8").strip())
            except (FileNotFoundError, UnicodeDecodeError):
                continue
    for info in storage.walk_files():
        if is_hidden(info.path) or info.path in referenced or info.path in intents:
            continue
        if info.mtime_ms > cutoff:
            report.young_skipped += 1
            continue
        report.orphans.append((storage.uri(info.path), info.size))
        if not dry_run:
            storage.delete(info.path)
    for entry in storage.list_dir(STAGING_DIR):
        if not entry.is_dir or entry.path in live_staging:
            continue
        newest = max((f.mtime_ms for f in storage.walk_files(entry.path)), default=entry.mtime_ms)
        if newest > cutoff:
            report.young_skipped += 1
            continue
        report.staging.append(storage.uri(entry.path))
        if not dry_run:
            abort_attempt(storage, entry.path)
    if not dry_run:
        delete_stale_indexes(storage, ManifestLog(storage))
    return report
