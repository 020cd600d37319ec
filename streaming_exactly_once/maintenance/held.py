"""The files ``seo gc`` keeps although the table's latest batch no longer lists them, and when
each becomes collectable.

A file leaves the listing only at a compaction batch (a rewrite replaced it, or ``retention``
dropped it), but the manifest files of the batches before still list it: ``as_of`` reads it
until the log's retention deletes those manifest files. The writer deletes them once it has
committed ``min_batches_to_retain`` batches more (Spark's rule, ``log.compaction.deletable_below``)
and ``cleanup_delay`` has passed; gc then deletes the file once it is older than ``--older-than``.
On a Delta or Iceberg table, that format's log keeps the files its retained versions name in
the same way (Delta's ``delta_log_retention``, Iceberg's snapshot expiry).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..log.compaction import deletable_below, is_compaction_batch
from ..manifest.manifest_log import ManifestLog
from ..readers.retained import retained_files
from ..storage.base import Storage
from ..table.identity import TableIdentity

#: An Iceberg table's metadata files (``iceberg.engine.METADATA_DIR``): not data files anyone replaced
ICEBERG_METADATA = "metadata/"
#: Spark's ``minBatchesToRetain`` and the sink's default; the table does not record the stream's
DEFAULT_MIN_BATCHES_TO_RETAIN = 100


@dataclass
class HeldFiles:
    """Files kept for one reason, collectable at one point."""

    #: ``time-travel``: older manifest files list them; ``delta`` / ``iceberg``: that format's log does
    reason: str
    files: list[tuple[str, int]] = field(default_factory=list)  # (URI, size)
    #: time travel: the newest batch whose ``as_of`` reads them
    newest_batch: int | None = None
    #: time travel: once the stream has committed this batch, log retention may delete the
    #: manifest files that list them (after ``cleanup_delay``); gc deletes them after that
    collectable_after_batch: int | None = None

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.files)


def held_files(
    storage: Storage,
    identity: TableIdentity | None,
    manifest: ManifestLog,
    batch_ids: list[int],
    kept: dict[str, int],
    *,
    min_batches_to_retain: int = DEFAULT_MIN_BATCHES_TO_RETAIN,
) -> list[HeldFiles]:
    """``kept``: path (relative to the table) -> size of the files on disk gc keeps, pending
    commits' files left out. Returns those the latest batch does not list, grouped by why."""
    if not kept or not batch_ids:
        return []
    interval = manifest.interval
    compactions = [b for b in batch_ids if is_compaction_batch(b, interval)]
    last_seen: dict[str, int] = {}
    live: set[str] = set()
    live_from = compactions[-1] if compactions else batch_ids[0]
    for batch_id in batch_ids:
        listed = retained_files(storage, identity, manifest, [batch_id]) & kept.keys()
        if is_compaction_batch(batch_id, interval):
            live = set()  # a compact file is the whole listing at its batch
        if batch_id >= live_from:
            live |= listed
        for path in listed:
            last_seen[path] = batch_id
    by_newest: dict[int, HeldFiles] = {}
    other = HeldFiles(reason="delta" if identity is not None and identity.is_delta else "iceberg")
    latest = batch_ids[-1]
    for path, size in sorted(kept.items()):
        if path in live:
            continue
        seen = last_seen.get(path)
        if seen is None:
            other.files.append((storage.uri(path), size))
            continue
        left_at = next((c for c in range(seen + 1, latest + 1) if is_compaction_batch(c, interval)), latest + 1)
        group = by_newest.get(left_at - 1)
        if group is None:
            after = collectable_after(left_at - 1, latest, interval, min_batches_to_retain)
            group = by_newest[left_at - 1] = HeldFiles("time-travel", newest_batch=left_at - 1, collectable_after_batch=after)
        group.files.append((storage.uri(path), size))
    return [by_newest[b] for b in sorted(by_newest)] + ([other] if other.files else [])


def collectable_after(newest: int, latest: int, interval: int, min_batches_to_retain: int) -> int:
    """The first batch after whose commit log retention may delete the manifest files of batch
    ``newest`` and every batch before it."""
    current = latest
    while (deletable_below(current, interval, min_batches_to_retain) or 0) <= newest:
        current += 1
    return current
