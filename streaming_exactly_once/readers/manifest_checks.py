"""Whether a table's manifest can be trusted: the checks readers and ``seo gc`` share.

* ``latest_batch`` (readers of the latest snapshot): the manifest is listed once; a stray file
  far beyond the others is a named error, not a batch (``BatchLog.gaps``, O(files present));
  and the commits log must not go further than the manifest - a deleted latest manifest file
  would otherwise make readers return an older snapshot without a word.
* ``check_complete`` (``seo gc``, which deletes every file no manifest file names): all of the
  above, and no manifest file missing anywhere between the oldest and the newest. A missing
  file's data files would look like garbage, and restoring the file from a backup afterwards
  would no longer help.

The commits log is listed before the manifest: a commit record is written after its manifest
file, so a commit landing between the two listings cannot make a healthy table look truncated.
"""

from __future__ import annotations

from ..errors import MissingBatchError
from ..manifest.manifest_log import ManifestLog
from ..storage.base import Storage
from ..table.commits_log import CommitsLog
from ..table.identity import TableIdentity

TRUNCATED_HINT = "Manifest files were deleted; readers would miss committed data. Restore them from a backup."


def _listed(storage: Storage, identity: TableIdentity | None, manifest: ManifestLog, commits: CommitsLog | None) -> tuple[list[int], list[int]]:
    """(manifest batch ids present, gaps between them); raises on a stray or truncated manifest."""
    committed = None
    if identity is not None:
        if commits is None:
            commits = CommitsLog(storage, interval=identity.compact_interval)
        committed_ids = commits.list_batch_ids()
        commits.gaps(committed_ids)  # a stray commits file is named, not taken for the latest batch
        committed = committed_ids[-1] if committed_ids else None
    ids = manifest.list_batch_ids()
    gaps = manifest.gaps(ids)
    latest = ids[-1] if ids else None
    if committed is not None and (latest is None or committed > latest):
        first_missing = (latest if latest is not None else -1) + 1
        raise MissingBatchError(
            directory=manifest.uri(),
            missing=list(range(first_missing, min(committed, first_missing + 9) + 1)),
            context=f"the commits log records batches up to {committed}",
            hint=TRUNCATED_HINT,
        )
    return ids, gaps


def latest_batch(storage: Storage, identity: TableIdentity | None, manifest: ManifestLog, *, commits: CommitsLog | None = None) -> int | None:
    """The latest manifest batch, after the checks for readers (module docstring). ``commits``:
    the table's commits log, if the caller has one open (it is then listed once per read)."""
    ids, _ = _listed(storage, identity, manifest, commits)
    return ids[-1] if ids else None


def check_complete(storage: Storage, identity: TableIdentity | None, manifest: ManifestLog) -> list[int]:
    """Every manifest batch id present, after the checks for ``seo gc`` (module docstring)."""
    ids, gaps = _listed(storage, identity, manifest, None)
    if gaps:
        raise MissingBatchError(
            directory=manifest.uri(),
            missing=gaps,
            context=f"the manifest has batch files {ids[0]}..{ids[-1]} with these in between missing",
            hint=TRUNCATED_HINT,
        )
    return ids
