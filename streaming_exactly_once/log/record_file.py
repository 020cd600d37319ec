"""Files that hold exactly one versioned record: ``v1`` + one JSON line (identity, lease files).

::

    v1
    {"epoch":4,"writerId":"2f6c...", ...}

Same header and JSON rules as batch logs (``log.version``); reading gives a record object or
None when the file is absent, and a ``LogCorruptError`` naming the file for anything else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import LogCorruptError
from ..storage.base import Storage
from .codec import RecordError
from .version import encode_file, encode_line, parse_body

R = TypeVar("R")


def encode_record(obj: dict[str, Any], *, version: int = 1) -> bytes:
    return encode_file(version, [encode_line(obj)])


def read_record(storage: Storage, path: str, from_json: Callable[[dict[str, Any]], R], *, hint: str, version: int = 1) -> R | None:
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        return None
    except (IsADirectoryError, NotADirectoryError) as exc:
        raise LogCorruptError(path=storage.uri(path), batch_id=None, problem=f"not a file ({exc.strerror})", hint=hint) from None
    uri = storage.uri(path)
    _, objects = parse_body(data, path=uri, batch_id=None, max_supported=version, hint=hint)
    if len(objects) != 1:
        raise LogCorruptError(path=uri, batch_id=None, problem=f"expected exactly one record, found {len(objects)}", hint=hint)
    try:
        return from_json(objects[0])
    except RecordError as exc:
        raise LogCorruptError(path=uri, batch_id=None, problem=str(exc), hint=hint) from None
