"""Fields the table-format steps (``CommitDelta``, ``CommitIceberg``) share in a WAL entry, and
their checks: a batch's data files as ``[[path, size, mtime], ...]`` with paths inside the table,
``partitionBy`` and ``info`` of strings only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ...log.codec import RecordError, non_negative, path_value
from ...storage.base import check_relative


class DataFile(Protocol):
    path: str
    size: int
    mtime_ms: int


F = TypeVar("F", bound=DataFile)


def inside(path: str) -> str:
    """``path``, which must be relative and inside the table."""
    try:
        return check_relative(path)
    except ValueError:
        raise RecordError(f"{path[:60]!r} is not a path inside the table") from None


def inside_field(path: str, name: str) -> str:
    return inside(path)


def strings(value: Any, name: str) -> Any:
    """``partitionBy`` (a list, kept as a tuple) and ``info`` (an object) hold strings only."""
    if not all(isinstance(v, str) for v in (value.values() if isinstance(value, dict) else value)):
        raise RecordError("fields 'partitionBy' and 'info' must hold strings")
    return dict(value) if isinstance(value, dict) else tuple(value)


def files_json(files: list[F]) -> list[list[Any]]:
    return [[f.path, f.size, f.mtime_ms] for f in files]


def files_decoder(make: Callable[[str, int, int], F]) -> Callable[[list[Any]], list[F]]:
    """The ``files`` field's decoder, building each file with ``make(path, size, mtime_ms)``."""

    def decode(items: list[Any]) -> list[F]:
        files = []
        for item in items:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and all(isinstance(v, int) for v in item[1:])):
                raise RecordError("field 'files' must hold [path, size, mtime] triples")
            files.append(make(inside(path_value(item[0], "files")), non_negative(item[1], "files"), item[2]))
        return files

    return decode
