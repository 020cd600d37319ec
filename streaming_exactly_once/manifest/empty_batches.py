"""Manifest batches that hold no file, and why a Delta or Iceberg log may skip them.

Where they come from: the batches ``seo compact`` commits to reach the table's next compaction
batch (``maintenance.compact``: Spark's batch reader takes a replacement of files only from a
``.compact`` manifest file, and Spark derives the compact interval from the ``.compact`` files'
ids, so a rewrite of a stopped table is published at the next compaction batch id and the batch
ids before it must be there too); and a batch the sink commits although it wrote no row - a
query's first batch (it records where the query starts) or a batch that records an offset reset.
They add no data, so a Delta or Iceberg table gets no commit of theirs: the format's log holds
the batch before them. Wherever a format's log is compared with the manifest (the commit's order
check, a writer's open, ``seo verify``, ``as_of``), a gap between the two is accepted only if
every batch in it is such a batch: a delta file (never a ``.compact``) that exists and lists no
file. A ``.compact`` file lists every live file, so it cannot show that its batch added none: a
batch of no file at a compaction batch id gets a format commit of no file instead
(``commit.table_plan``). Tables written before that rule may lack it, so a compaction batch in
the gap is accepted when its ``.compact`` lists no file the batch before it did not (both lists
are read: only where a format's log lags).
"""

from __future__ import annotations

from ..errors import ExactlyOnceError
from ..log.compaction import is_compaction_batch
from .manifest_log import ManifestLog


def empty_between(manifest: ManifestLog, after: int, upto: int) -> bool:
    """Whether every manifest batch ``b`` with ``after < b <= upto`` holds no file (module
    docstring); True for an empty range."""
    for batch_id in range(after + 1, upto + 1):
        if is_compaction_batch(batch_id, manifest.interval):
            if not _adds_nothing(manifest, batch_id):
                return False
            continue
        records = manifest.get(batch_id)
        if records is None or records:
            return False
    return True


def _adds_nothing(manifest: ManifestLog, batch_id: int) -> bool:
    """Whether compaction batch ``batch_id`` lists only files live in the batch before it (its
    retention may leave some out): a batch of no file (module docstring)."""
    if batch_id == 0:
        return False
    try:
        before = {entry.path for entry in manifest.files(batch_id - 1)}
        now = manifest.files(batch_id)
    except (ExactlyOnceError, FileNotFoundError):  # a batch gone from the log: no proof
        return False
    return all(entry.path in before for entry in now)


def holds_manifest(applied: int | None, latest: int, manifest: ManifestLog) -> bool:
    """Whether a format's log whose newest batch is ``applied`` (None: none) holds what the
    manifest, at batch ``latest``, holds: the same batch, or one whose later batches hold no file."""
    held = -1 if applied is None else applied
    return held == latest or (held < latest and empty_between(manifest, held, latest))


__all__ = ["empty_between", "holds_manifest"]
