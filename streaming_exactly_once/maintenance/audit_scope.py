"""How much of a table's manifest an ``seo audit`` run reads: flat per new batch after a mark.

A run after a mark finds the newest manifest batch by probing forward from the mark's (one
existence check per new batch plus one) instead of listing ``_spark_metadata``, whose listing grows
with the history. It reads the whole live listing (compact file + deltas, O(live files)), and so
runs the whole-table checks (a file live twice, Delta and Iceberg against the manifest), only
when the newest compact file is not the one the mark saw (another batch, size or mtime), with
``--from``, or without a usable mark. Between two compact files the new batches only add files
(data compaction and retention act when a compact file is written), so the files of the new
batches are all that became live, and each batch's own checks cover them. The whole checks thus
run once per compact interval, when Spark's reader reads the same compact file anyway. The batch
files after the compact file (fewer than the interval) are stat'ed on every run: one changed
since the run that audited it (an entry added by hand) has its files checked again. A dataset
group's root has no manifest: its commits log, which numbers the group batches, is probed alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import LogCorruptError
from ..log.compactible_log import CompactibleLog
from ..log.version import encode_file
from ..manifest.entry import ManifestEntry
from ..manifest.manifest_log import ManifestLog
from ..table.audit_mark import AuditMark, ManifestSeen
from ..table.ledger_checks import Violation


@dataclass(frozen=True)
class Scope:
    latest: int | None
    #: read the live listing and run the whole-table checks
    whole: bool
    #: what the next run compares against (saved in the mark)
    seen: ManifestSeen
    #: storage operations this took
    ops: int
    #: batches audited before whose manifest file changed since
    changed: tuple[int, ...] = ()
    #: the URI of the next batch's file written under the wrong kind's name (probed runs)
    misnamed: str | None = None

    def misnamed_violations(self, batch_id: int) -> list[Violation]:
        if self.misnamed is None:
            return []
        return [
            Violation(
                "files",
                batch_id,
                f"Manifest batch {batch_id} is written as {self.misnamed}, a name its kind (compact interval {self.seen.interval}) "
                "does not have: every reader fails on it, and no commit of this library wrote it. Remove it (keep a copy), then "
                "run seo verify.",
            )
        ]


def manifest_scope(manifest: CompactibleLog[Any], mark: AuditMark | None, *, from_batch: int | None) -> Scope:
    seen = mark.manifest if mark is not None and from_batch is None else None
    ops = 0
    misnamed = None
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
            ops += 1
            misnamed = _misnamed(manifest, latest + 1)
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
    after: list[tuple[int, int, int]] = []
    for b in range(0 if compact is None else compact + 1, (-1 if latest is None else latest) + 1):
        ops += 1
        try:
            info = manifest.storage.info(manifest.path(b))
        except FileNotFoundError:
            continue
        after.append((b, info.size, info.mtime_ms))
    now = ManifestSeen(interval=interval, compact=compact, compact_size=size, compact_mtime_ms=mtime, after=tuple(after))
    whole = not probed or seen is None or not seen.same_compact(now)
    changed: tuple[int, ...] = ()
    if seen is not None and mark is not None:
        before = {b: (s, m) for b, s, m in seen.after}
        changed = tuple(b for b, s, m in after if b <= mark.audited_to and b in before and before[b] != (s, m))
    return Scope(latest=latest, whole=whole, seen=now, ops=ops, changed=changed, misnamed=misnamed)


def _misnamed(manifest: CompactibleLog[Any], batch_id: int) -> str | None:
    """The next batch's file under the other kind's name (``N`` where the interval makes it
    ``N.compact``, or the reverse): readers list the directory, find it and fail on it, while
    the probe for the right name finds nothing."""
    right = manifest.path(batch_id)
    other = right.removesuffix(".compact") if right.endswith(".compact") else right + ".compact"
    return manifest.storage.uri(other) if manifest.storage.exists(other) else None


def own_entries(manifest: ManifestLog, batch_id: int, count: int) -> list[ManifestEntry] | None:
    """The last ``count`` entries of compact file ``batch_id``, read from its tail: a compact file
    is the entries kept from before it, then the batch's own (``CompactibleLog.fold``), so a
    compaction batch's own files end it. Reading the whole file for each compaction batch made a
    full audit O(batches x live files / interval). None: not found, or the tail does not hold
    ``count`` whole lines (then the caller reads the file)."""
    if count == 0:
        return []
    want = max(64 * 1024, 4096 * count)
    try:
        data = manifest.storage.read_tail(manifest.path(batch_id), want).rstrip(b"\n")
    except FileNotFoundError:
        return None
    lines = data.split(b"\n")
    if len(lines) < count + 1:  # the first piece may be a cut line (or the header)
        return None
    try:
        return manifest.decode(encode_file(manifest.version, lines[-count:]), batch_id=batch_id)
    except LogCorruptError:
        return None
