"""The names of the metadata files our Iceberg commits write: whose batch each one was for.

pyiceberg names the manifests and the manifest list a commit writes after the commit's UUID
(``<uuid>-m<N>.avro``, ``snap-<snapshot id>-<attempt>-<uuid>.avro``). Our commits use a UUID
that says whose batch it was (a version-8 UUID)::

    aaaaaaaa-rrrr-8rrr-Vrrr-bbbbbbbbbbbb
    a: the first 32 bits of SHA-256 of the app id     b: the manifest batch id, 48 bits
    r: random (42 bits, so two attempts at one batch never share a name)   V: variant 10xx

``IcebergTarget`` names its commits so; ``leftovers`` reads the names back to find what an
interrupted commit left. Other writers' files (random UUIDs, version 4) never match.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid

_BATCH_BITS = 48
UUID_IN_NAME = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")


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
    found = commit_of_file(name, app_id)
    return None if found is None else found[1]


def commit_of_file(name: str, app_id: str) -> tuple[str, int] | None:
    """(commit UUID, batch) of a file a commit of ``app_id`` wrote, from its name."""
    for text in UUID_IN_NAME.findall(name):
        value = uuid.UUID(text)
        if value.version == 8 and value.int >> 96 == _app_bits(app_id):
            return text, value.int & ((1 << _BATCH_BITS) - 1)
    return None
