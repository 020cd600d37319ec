"""The metadata files an interrupted Iceberg commit of ours left, told apart by their names.

pyiceberg names the manifests and the manifest list a commit writes after the commit's UUID
(``<uuid>-m<N>.avro``, ``snap-<snapshot id>-<attempt>-<uuid>.avro``) and writes them before
the commit's point of no return. A writer killed in between leaves them behind, named by no
metadata version. Our commits use a UUID that says whose batch it was (a version-8 UUID)::

    aaaaaaaa-rrrr-8rrr-Vrrr-bbbbbbbbbbbb
    a: the first 32 bits of SHA-256 of the app id     b: the manifest batch id, 48 bits
    r: random (42 bits, so two attempts at one batch never share a name)   V: variant 10xx

Once the table holds batch ``M``, no writer can commit a snapshot of batch ``M`` or earlier any
more (``IcebergTarget.commit`` finds it done first): a file of ours named after such a batch
that no retained metadata version needs is garbage, whoever wrote it - even a fenced writer
still running. A roll-forward deletes them (``discard_leftovers``); files of other writers
(random UUIDs, version 4) are never touched here (``seo gc`` judges them by age).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
from typing import TYPE_CHECKING

from .catalogs import METADATA_DIR

if TYPE_CHECKING:
    from .target import IcebergTarget

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
    for text in _UUID.findall(name):
        value = uuid.UUID(text)
        if value.version == 8 and value.int >> 96 == _app_bits(app_id):
            return value.int & ((1 << _BATCH_BITS) - 1)
    return None


def discard_leftovers(target: IcebergTarget, batch_id: int) -> list[str]:
    """Delete (and return) the metadata files of ours for batches up to ``batch_id`` that no
    retained metadata version needs; nothing unless the table holds ``batch_id``."""
    applied = target.applied_batch()
    if applied is None or applied < batch_id:
        return []
    needed: set[str] | None = None
    gone = []
    for info in target.storage.list_dir(METADATA_DIR):
        name = info.path.rsplit("/", 1)[-1]
        owner_batch = None if info.is_dir else batch_of_file(name, target.app_id)
        if owner_batch is None or owner_batch > batch_id:
            continue
        if needed is None:
            needed = target.referenced_files()
        if info.path not in needed:
            target.storage.delete(info.path)
            gone.append(info.path)
    return gone
