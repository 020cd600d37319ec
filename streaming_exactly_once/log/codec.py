"""How one record type maps to one JSON object per log line, with strict field checks.

A codec is the only thing a concrete log (manifest, commits, sources, ...) has to supply.
Decoding is strict the way Spark's json4s case classes are - every declared field must be
present with the right type, unknown fields are ignored (forward compatibility within a
version) - but a failure is a ``RecordError`` with the field's name, which the log turns into
a ``LogCorruptError`` naming the file, the batch and the line.

Integers must fit a signed 64-bit long, as they do for Spark's (Scala ``Long``) readers: a
larger one is valid JSON but makes Arrow raise ``OverflowError`` (and Spark fail) further up.
Paths must be text a filesystem can name (``path_value``): no NUL character.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

_TYPE_NAMES = {bool: "a boolean", int: "an integer", str: "a string", dict: "an object", list: "a list"}

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class RecordError(ValueError):
    """A JSON object does not have the shape a record type needs."""


class RecordCodec(Protocol[T]):
    """Encode a record to a JSON-ready dict (field order = on-disk order) and back."""

    def to_json(self, record: T) -> dict[str, Any]: ...

    def from_json(self, obj: dict[str, Any]) -> T: ...


def field(obj: dict[str, Any], name: str, kind: type, *, optional: bool = False, default: Any = None) -> Any:
    """``obj[name]`` checked against ``kind``; ``RecordError`` names the field if wrong."""
    if name not in obj or obj[name] is None:
        if optional:
            return default
        raise RecordError(f"missing field '{name}'")
    value = obj[name]
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise RecordError(f"field '{name}' must be {_TYPE_NAMES.get(kind, kind.__name__)}, found {value!r:.40}")
    if kind in (int, float) and isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        raise RecordError(f"field '{name}' is {str(value)[:25]}..., outside the 64-bit range every reader uses")
    return value


def non_negative(value: int, name: str) -> int:
    """``value`` if it is >= 0 (sizes, counts); ``RecordError`` naming the field otherwise."""
    if value < 0:
        raise RecordError(f"field '{name}' must not be negative, found {value}")
    return value


def path_value(value: str, name: str) -> str:
    """A file path or URI field: refused if it holds NUL, which no filesystem allows in a name
    (local calls would raise a bare ``ValueError: embedded null byte``)."""
    if "\x00" in value:
        raise RecordError(f"field '{name}' holds a NUL character, which no file name can: {value[:60]!r}")
    return value


class DictCodec(Generic[T]):
    """Codec for records that are plain dicts (used by tests and ad-hoc logs)."""

    def to_json(self, record: dict[str, Any]) -> dict[str, Any]:
        return record

    def from_json(self, obj: dict[str, Any]) -> dict[str, Any]:
        return obj
