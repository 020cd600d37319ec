"""Records declared once, as dataclasses: their JSON is derived from the fields.

Spark derives the JSON of its log records (``SinkFileStatus``, ``CommitMetadata``, ...) from
the case classes with json4s; this module does the same for Python dataclasses. Each field
that is part of the JSON carries its description in the field's metadata::

    @dataclass(frozen=True)
    class SourceFileRecord:
        batch_id: int = dc_field(metadata=json_field("batchId", int))
        path: str = dc_field(metadata=json_field("path", str, check=path_value))

* ``encode(record)`` writes the fields in the dataclass's order (which is therefore the on-disk
  order: keep the fields in the order of the format's docstring);
* ``decode(cls, obj)`` reads them with ``codec.field``'s strict checks - a missing required
  field, a wrong type, a bool where an integer is due, an integer outside the 64-bit range -
  and the field's ``check`` (``non_negative``, ``path_value``, ``one_of(...)``), raising
  ``RecordError`` with the same messages the hand-written codecs gave;
* ``DataclassCodec(cls)`` is the ``RecordCodec`` a log needs for such a record.

The irregular parts of the formats are declared too: a field written only when it differs from
its default (``omit_default``), a field written as another field's value when it is None
(``fallback``), a nested record or a list of records (``record``) or a map of them (``values``), a record whose fields are
written inline in its parent's object (``flatten``: the attempt key), and a field whose JSON
is not the plain value (``encode``/``decode`` converters: a tuple written as a list, a
``{"appId": ...}`` wrapper). Fields without a ``json_field`` are not part of the JSON: decoding
leaves them at their default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .codec import RecordError, field

T = TypeVar("T")

_KEY = "streaming_exactly_once.json"
_NO_DEFAULT: Any = object()


@dataclass(frozen=True)
class JsonField:
    """How one dataclass field appears in its record's JSON object (see the module docstring)."""

    name: str
    kind: type
    optional: bool = False
    check: Callable[[Any, str], Any] | None = None
    omit_default: bool = False
    record: type | None = None
    fallback: str | None = None
    flatten: bool = False
    encode: Callable[[Any], Any] | None = None
    decode: Callable[[Any], Any] | None = None
    values: type | None = None


def json_field(
    name: str,
    kind: type,
    *,
    optional: bool = False,
    check: Callable[[Any, str], Any] | None = None,
    omit_default: bool = False,
    record: type | None = None,
    fallback: str | None = None,
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
    values: type | None = None,
) -> Mapping[str, JsonField]:
    """Metadata for ``dataclasses.field(metadata=...)``: the field is the JSON key ``name``.

    * ``kind`` - the JSON type (``int``, ``str``, ``bool``, ``float``, ``dict``, ``list``);
    * ``optional`` - absent or null on read gives the field's default (None without one);
    * ``check(value, name)`` - a further check run on read, returning the value to keep;
    * ``omit_default`` - not written when the value equals the field's default;
    * ``record`` - the value is that record (``kind=dict``) or a list of them (``kind=list``);
    * ``values`` - the value is a map (``kind=dict``) from names to records of that type;
    * ``fallback`` - written as that other field's value when this one is None;
    * ``encode``/``decode`` - converters between the field's value and its JSON value.
    """
    spec = JsonField(name, kind, optional, check, omit_default, record, fallback, False, encode, decode, values)
    return {_KEY: spec}


def flattened(record: type) -> Mapping[str, JsonField]:
    """Metadata for a field holding a record whose JSON fields are written inline, at this
    position of the parent's object (the on-disk format stays flat)."""
    return {_KEY: JsonField("", dict, record=record, flatten=True)}


def one_of(*allowed: str) -> Callable[[Any, str], Any]:
    """A ``check``: the value must be one of ``allowed``."""

    def check(value: Any, name: str) -> Any:
        if value not in allowed:
            names = " or ".join(f"'{a}'" for a in allowed)
            raise RecordError(f"field '{name}' must be {names}, not {value!r}")
        return value

    return check


def strings(value: Any, name: str) -> tuple[str, ...]:
    """A ``check`` for a list of strings, kept as a tuple."""
    if not all(isinstance(v, str) for v in value):
        raise RecordError(f"field '{name}' must be a list of strings")
    return tuple(value)


def json_object(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object (a nested record must be one)."""
    if not isinstance(value, dict):
        raise RecordError("expected a JSON object")
    return value


@dataclass(frozen=True)
class _Slot:
    attr: str
    spec: JsonField
    default: Any  # _NO_DEFAULT, a value, or a zero-argument factory (when ``factory``)
    factory: bool

    @property
    def plain(self) -> bool:
        """Written as the value itself (the common case, kept fast: manifests have many lines)."""
        s = self.spec
        return not (s.flatten or s.omit_default or s.fallback or s.encode or s.record or s.values or s.kind is list)


_SLOTS: dict[type, tuple[_Slot, ...]] = {}
#: per record type: (attribute, JSON name) of every field when all of them are plain, else None
_PLAIN: dict[type, tuple[tuple[str, str], ...] | None] = {}


def _slots(cls: type) -> tuple[_Slot, ...]:
    slots = _SLOTS.get(cls)
    if slots is None:
        found = []
        for f in dataclasses.fields(cls):
            spec = f.metadata.get(_KEY)
            if spec is None:
                continue
            if f.default_factory is not dataclasses.MISSING:
                found.append(_Slot(f.name, spec, f.default_factory, True))
            elif f.default is not dataclasses.MISSING:
                found.append(_Slot(f.name, spec, f.default, False))
            else:
                found.append(_Slot(f.name, spec, _NO_DEFAULT, False))
        slots = _SLOTS[cls] = tuple(found)
    return slots


def json_names(cls: type) -> frozenset[str]:
    """The JSON keys a declared record type reads (those of flattened records included)."""
    names: set[str] = set()
    for slot in _slots(cls):
        if slot.spec.flatten and slot.spec.record is not None:
            names |= json_names(slot.spec.record)
        else:
            names.add(slot.spec.name)
    return frozenset(names)


def _default(slot: _Slot) -> Any:
    return slot.default() if slot.factory else slot.default


def _encode_value(spec: JsonField, value: Any) -> Any:
    if spec.encode is not None:
        return spec.encode(value)
    if spec.record is not None and value is not None:
        return [encode(v) for v in value] if spec.kind is list else encode(value)
    if spec.values is not None and value is not None:
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return list(value)
    return value


def _plain(cls: type) -> tuple[tuple[str, str], ...] | None:
    if cls not in _PLAIN:
        slots = _slots(cls)
        _PLAIN[cls] = tuple((s.attr, s.spec.name) for s in slots) if all(s.plain for s in slots) else None
    return _PLAIN[cls]


def encode(record: Any) -> dict[str, Any]:
    """The JSON object of a declared record, its keys in the dataclass's field order."""
    plain = _plain(type(record))
    if plain is not None:
        return {name: getattr(record, attr) for attr, name in plain}
    out: dict[str, Any] = {}
    for slot in _slots(type(record)):
        spec = slot.spec
        value = getattr(record, slot.attr)
        if spec.flatten:
            out.update(encode(value))
            continue
        if value is None and spec.fallback is not None:
            value = getattr(record, spec.fallback)
        if spec.omit_default and slot.default is not _NO_DEFAULT and value == _default(slot):
            continue
        out[spec.name] = _encode_value(spec, value)
    return out


def _decode_value(spec: JsonField, value: Any) -> Any:
    if spec.record is not None:
        if spec.kind is list:
            value = [decode(spec.record, json_object(v)) for v in value]
        else:
            value = decode(spec.record, value)
    if spec.values is not None:
        value = {k: decode(spec.values, json_object(v)) for k, v in value.items()}
    if spec.decode is not None:
        value = spec.decode(value)
    if spec.check is not None:
        value = spec.check(value, spec.name)
    return value


def decode(cls: type[T], obj: dict[str, Any]) -> T:
    """The record of type ``cls`` that ``obj`` holds; ``RecordError`` names a bad field."""
    kwargs: dict[str, Any] = {}
    for slot in _slots(cls):
        spec = slot.spec
        if spec.flatten:
            assert spec.record is not None
            kwargs[slot.attr] = decode(spec.record, obj)
            continue
        value = field(obj, spec.name, spec.kind, optional=spec.optional, default=_NO_DEFAULT)
        if value is _NO_DEFAULT:
            if slot.default is _NO_DEFAULT:
                kwargs[slot.attr] = None
            continue
        kwargs[slot.attr] = _decode_value(spec, value)
    return cls(**kwargs)


class DataclassCodec(Generic[T]):
    """The ``RecordCodec`` of a declared record type: ``encode`` and ``decode`` of ``cls``."""

    def __init__(self, cls: type[T]) -> None:
        self.cls = cls

    def to_json(self, record: T) -> dict[str, Any]:
        return encode(record)

    def from_json(self, obj: dict[str, Any]) -> T:
        return decode(self.cls, obj)
