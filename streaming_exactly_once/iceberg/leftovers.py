"""The metadata files an interrupted Iceberg commit of ours left, told apart by their names.

pyiceberg names the manifests and the manifest list a commit writes after the commit's UUID
(``<uuid>-m<N>.avro``, ``snap-<snapshot id>-<attempt>-<uuid>.avro``) and writes them before
the commit's point of no return. A writer killed in between leaves them behind, named by no
metadata version. Our commits use a UUID that says whose batch it was (a version-8 UUID)::

    aaaaaaaa-rrrr-8rrr-Vrrr-bbbbbbbbbbbb
    a: the first 32 bits of SHA-256 of the app id     b: the manifest batch id, 48 bits
    r: random (42 bits, so two attempts at one batch never share a name)   V: variant 10xx

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

import hashlib
import logging
import re
import secrets
import uuid
from typing import TYPE_CHECKING

from .engine import METADATA_DIR

if TYPE_CHECKING:
    from .target import IcebergTarget

log = logging.getLogger("streaming_exactly_once.iceberg")

_BATCH_BITS = 48
_UUID = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")


def _app_bits(app_id: str) -> int:
    return int.from_bytes(hashlib.sha256(app_id.encode()).digest()[:4], "big")


def batch_commit_uuid(app_id: str, batch_id: int) -> uuid.UUID:
    """The UUID of a commit of manifest batch ``batch_id`` of ``app_id`` (layout above)."""
    if not 0 <= batch_id < 1 << _BATCH_BITS:
        raise ValueError(f"batch id {batch_id} does not fit in {_BATCH_BITS} bits")
    rand = secrets.randbits(42)
    value = _app_bits(app_id) << 96
    value |= (rand >> 26) << 80  # 16 random bits
    value |= 0x8 << 76  # version 8
    value |= ((rand >> 14) & 0xFFF) << 64  # 12 random bits
    value |= 0b10 << 62  # variant
    value |= (rand & 0x3FFF) << 48  # 14 random bits
    value |= batch_id
    return uuid.UUID(int=value)


def batch_of_file(name: str, app_id: str) -> int | None:
    """The batch a metadata file's name says a commit of ``app_id`` wrote it for, if it says so."""
    found = _commit_of_file(name, app_id)
    return None if found is None else found[1]


def _commit_of_file(name: str, app_id: str) -> tuple[str, int] | None:
    """(commit UUID, batch) of a file a commit of ``app_id`` wrote, from its name."""
    for text in _UUID.findall(name):
        value = uuid.UUID(text)
        if value.version == 8 and value.int >> 96 == _app_bits(app_id):
            return text, value.int & ((1 << _BATCH_BITS) - 1)
    return None


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
    landed = {m.group(1) for s in snapshots if (m := _UUID.search(s.manifest_list.rsplit("/", 1)[-1]))}
    manifests: set[str] | None = None  # read at the first file of a commit no retained snapshot names
    gone = []
    for info in target.storage.list_dir(METADATA_DIR):
        name = info.path.rsplit("/", 1)[-1]
        found = None if info.is_dir else _commit_of_file(name, target.app_id)
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
