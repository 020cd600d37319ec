"""How much of a table's manifest an ``seo audit`` run reads: flat per new batch after a mark.

A run after a mark finds the newest manifest batch by probing forward from the mark's (one
existence check per new batch plus one) instead of listing ``_spark_metadata``, whose listing grows
with the history. It reads the whole live listing (compact file + deltas, O(live files)), and so
runs the whole-table checks (a file live twice, Delta and Iceberg against the manifest), only
when the newest compact file is not the one the mark saw (another batch, size or mtime), with
``--from``, or without a usable mark. Between two compact files the new batches only add files
(data compaction and retention act when a compact file is written), so the files of the new
batches are all that became live, and each batch's own checks cover them. The whole checks thus
run once per compact interval, when Spark's reader reads the same compact file anyway. A dataset
group's root has no manifest: its commits log, which numbers the group batches, is probed alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..log.compactible_log import CompactibleLog
from ..table.audit_mark import AuditMark, ManifestSeen


@dataclass(frozen=True)
class Scope:
    latest: int | None
    #: read the live listing and run the whole-table checks
    whole: bool
    #: what the next run compares against (saved in the mark)
    seen: ManifestSeen
    #: storage operations this took
    ops: int


def manifest_scope(manifest: CompactibleLog[Any], mark: AuditMark | None, *, from_batch: int | None) -> Scope:
    seen = mark.manifest if mark is not None and from_batch is None else None
    ops = 0
    latest: int | None = None
    probed = False
    if seen is not None and mark is not None and mark.latest_batch_id is not None:
        manifest.know_interval(seen.interval)
        ops += 1
        if manifest.storage.exists(manifest.path(mark.latest_batch_id)):
            latest, probed = mark.latest_batch_id, True
            while True:
                ops += 1
                if not manifest.storage.exists(manifest.path(latest + 1)):
                    break
                latest += 1
    if not probed:
        ops += 1
        latest = manifest.latest_batch_id(refresh=True)
    interval = manifest.interval
    compact = None if latest is None else (latest + 1) // interval * interval - 1
    compact = compact if compact is not None and compact >= 0 else None
    size = mtime = None
    if compact is not None:
        ops += 1
        try:
            info = manifest.storage.info(manifest.path(compact))
            size, mtime = info.size, info.mtime_ms
        except FileNotFoundError:
            pass
    now = ManifestSeen(interval=interval, compact=compact, compact_size=size, compact_mtime_ms=mtime)
    whole = not probed or seen != now
    return Scope(latest=latest, whole=whole, seen=now, ops=ops)
