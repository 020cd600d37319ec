"""The metadata files an interrupted Iceberg commit of ours left, told apart by their names.

pyiceberg writes the manifests and the manifest list of a commit before the commit's point of
no return. A writer killed in between leaves them behind, named by no metadata version. Our
commits name them after the batch they were for (``commit_names``).

Once the table holds batch ``M``, no writer can commit a snapshot of batch ``M`` or earlier any
more: ``IcebergTarget.commit`` finds it done first, and a writer frozen between reading the
table and its create loses even where later versions retired the one it creates
(``catalogs.PathCatalog``). A file of ours named after such a batch is garbage, whoever wrote
it - even a fenced writer still running - unless the commit that wrote it landed and a
retained snapshot still reads it: a manifest list or manifest of a retained snapshot's commit
is kept (a merged-away manifest of it too, for ``seo gc``); for any other commit, the retained
snapshots' manifest lists say whether they carry its manifests on (a compaction batch commits
two snapshots, and its append's manifests live on in its replace snapshot after the append
expires, so a batch retained under another UUID proves nothing). A writer's open
(after its recovery) and ``seo recover`` delete them (``discard_leftovers``); files of other writers
(random UUIDs, version 4) are never touched here (``seo gc`` judges them by age).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .commit_names import UUID_IN_NAME, commit_of_file
from .engine import METADATA_DIR

if TYPE_CHECKING:
    from .target import IcebergTarget

log = logging.getLogger("streaming_exactly_once.iceberg")


def discard_leftovers(target: IcebergTarget, batch_id: int) -> list[str]:
    """Delete (and return) our metadata files of batches up to ``batch_id`` that no retained
    snapshot needs; nothing unless the table holds ``batch_id``. Best effort: what it cannot
    judge stays (``seo gc`` judges it by age), and a failure is logged, never raised - a
    writer must not stop over garbage."""
    try:
        return _discard(target, batch_id)
    except Exception as exc:
        log.warning("left the files interrupted Iceberg commits of %s wrote (seo gc deletes them): %s", target.name, exc)
        return []


def _discard(target: IcebergTarget, batch_id: int) -> list[str]:

    applied = target.applied_batch()
    table = target.load(refresh=False)
    if table is None or applied is None or applied < batch_id:
        return []
    snapshots = table.metadata.snapshots
    landed = {m.group(1) for s in snapshots if (m := UUID_IN_NAME.search(s.manifest_list.rsplit("/", 1)[-1]))}
    manifests: set[str] | None = None  # read at the first file of a commit no retained snapshot names
    gone = []
    for info in target.storage.list_dir(METADATA_DIR):
        name = info.path.rsplit("/", 1)[-1]
        found = None if info.is_dir else commit_of_file(name, target.app_id)
        if found is None or found[1] > batch_id or found[0] in landed:
            continue  # not ours, not yet judged, or the commit that wrote it landed and is retained
        # landed and expired, or never: do retained snapshots carry it? (A batch retained under
        # another UUID is no proof it never landed: a compaction batch commits two snapshots,
        # and its append's manifests live on in its replace snapshot after the append expires.)
        if manifests is None:
            manifests = {m.manifest_path.rsplit("/", 1)[-1] for s in snapshots for m in s.manifests(table.io)}
        if name in manifests:
            continue
        target.storage.delete(info.path)
        gone.append(info.path)
    return gone
