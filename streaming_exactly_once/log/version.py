"""The ``v<N>`` first line of every log file, and parsing of a whole log file body.

Every log file (ours and Spark's) is UTF-8 text::

    v1\\n{"json":"record 1"}\\n{"json":"record 2"}

* line 1 is the format version ``v`` + a positive integer;
* one compact JSON object per following line, separated by ``\\n``;
* no trailing newline (Spark writes ``'\\n' + json`` per record); one trailing ``\\n`` is
  tolerated on read, as Spark's reader does; a blank line anywhere else is corruption.

On read, a line may also end with ``\\r\\n``: Spark reads log files with Scala's ``getLines``,
which ends a line there as at ``\\n``, so a file written with CRLF line ends (by a tool, or
copied through a Windows machine) is a valid log to Spark and must be one to us - to the
strict parser, the Arrow readers and the writer's compaction alike. The ``\\r``
of a CRLF is part of the line end, never of the header; in a record line it is JSON whitespace.
Nothing of ours writes ``\\r``: a compaction of such a file writes plain ``\\n``
(``CompactibleLog.raw_body``).

Parsing never raises a raw ``json``/``UnicodeDecodeError``: every problem becomes a
``LogCorruptError`` or ``UnsupportedLogVersionError`` naming the file, the batch, the line and
what to do. That includes input that is valid JSON but that nothing of ours can have written
and that would make a foreign exception come out further up (``loads_line`` says which):

* nesting deeper than ``MAX_DEPTH`` (``[[[[...`` - Python's decoder raises ``RecursionError``);
* ``NaN``, ``Infinity`` and numbers that overflow a float (not JSON; Python accepts them);
* a string with a lone UTF-16 surrogate (``"\\ud800"``): it cannot be encoded to UTF-8, so
  Arrow, the filesystem or our own writer would raise ``UnicodeEncodeError`` later.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from ..errors import LogCorruptError, UnsupportedLogVersionError

_HEADER = re.compile(r"v([0-9]{1,9})\r?")  # fullmatch; the \r of a CRLF line end (module docstring)

#: Deepest nesting of arrays/objects a log line may have. Our records nest four levels at most
#: (a group's commit record: datasets -> table -> watermarks -> column); the bound only has to
#: stay well below Python's recursion limit.
MAX_DEPTH = 64

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class LineError(ValueError):
    """A line is JSON Python can parse, but not JSON a log may hold (the message says why)."""


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise LineError(f"the number {text[:30]} does not fit a double")
    return value


def _no_constant(name: str) -> NoReturn:
    raise LineError(f"{name} is not a JSON value")


def _depth_ok(line: str) -> bool:
    """Whether brackets outside strings nest at most ``MAX_DEPTH`` deep (checked before parsing,
    so a hostile line never reaches the recursive decoder)."""
    if line.count("[") + line.count("{") <= MAX_DEPTH:
        return True
    depth = 0
    in_string = escaped = False
    for ch in line:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any("\ud800" <= ch <= "\udfff" for ch in item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def loads_line(line: str) -> Any:
    """``json.loads`` for one log line, refusing what the module docstring lists.

    Raises ``ValueError`` (``json.JSONDecodeError`` or ``LineError``) for anything unusable;
    never ``RecursionError`` or ``OverflowError``.
    """
    if not _depth_ok(line):
        raise LineError(f"nests deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(line, parse_float=_finite_float, parse_constant=_no_constant)
    except RecursionError:  # unreachable after _depth_ok; kept so no caller ever sees it
        raise LineError(f"nests deeper than {MAX_DEPTH} levels") from None
    if "\\u" in line and _SURROGATE_ESCAPE.search(line) and _has_lone_surrogate(value):
        raise LineError("holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text")
    return value


def header(version: int) -> bytes:
    """The first line's bytes for ``version``."""
    if version < 1:
        raise ValueError("log versions start at 1")
    return b"v%d" % version


def parse_version(line: str, *, path: str, batch_id: int | None, max_supported: int, hint: str) -> int:
    """Validate a header line (without its ``\\n``; one ``\\r`` before it is a CRLF line end,
    see the module docstring); returns the version number."""
    match = _HEADER.fullmatch(line)
    if match is None:
        shown = line[:40] + ("..." if len(line) > 40 else "")
        raise LogCorruptError(
            path=path,
            batch_id=batch_id,
            problem=f"the first line must be a version header like 'v1', found {shown!r}",
            hint=hint,
        )
    version = int(match.group(1))
    if version < 1:
        raise LogCorruptError(path=path, batch_id=batch_id, problem=f"invalid log version v{version}", hint=hint)
    if version > max_supported:
        raise UnsupportedLogVersionError(path=path, batch_id=batch_id, found=version, max_supported=max_supported)
    return version


def parse_body(data: bytes, *, path: str, batch_id: int | None, max_supported: int, hint: str) -> tuple[int, list[dict[str, Any]]]:
    """Split a log file into (version, list of JSON objects), with precise errors."""
    if not data:
        raise LogCorruptError(
            path=path,
            batch_id=batch_id,
            problem="the file is empty (a writer was cut off, or the disk filled up)",
            hint=hint,
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LogCorruptError(path=path, batch_id=batch_id, problem=f"not UTF-8 text (byte {exc.start})", hint=hint) from None
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # one trailing newline is tolerated
    version = parse_version(lines[0], path=path, batch_id=batch_id, max_supported=max_supported, hint=hint)
    records: list[dict[str, Any]] = []
    last = len(lines) - 1
    for number, line in enumerate(lines[1:], start=2):
        if line.strip() == "":
            raise LogCorruptError(path=path, batch_id=batch_id, problem=f"line {number} is blank", hint=hint)
        try:
            obj = loads_line(line)
        except LineError as exc:
            raise LogCorruptError(path=path, batch_id=batch_id, problem=f"line {number} {exc}", hint=hint) from None
        except ValueError:
            cut = number - 1 == last and not text.endswith("\n")
            problem = (
                f"line {number} is cut short: the file looks truncated"
                if cut and _looks_truncated(line)
                else f"line {number} is not valid JSON: {line[:60]!r}"
            )
            raise LogCorruptError(path=path, batch_id=batch_id, problem=problem, hint=hint) from None
        if not isinstance(obj, dict):
            raise LogCorruptError(path=path, batch_id=batch_id, problem=f"line {number} is not a JSON object", hint=hint)
        records.append(obj)
    return version, records


def _looks_truncated(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith("{") and not stripped.endswith("}")


def encode_line(obj: dict[str, Any]) -> bytes:
    """One record as compact JSON in insertion order, non-ASCII kept raw (as json4s does)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def encode_file(version: int, lines: list[bytes]) -> bytes:
    """Header + ``\\n`` + record per line, no trailing newline (Spark's exact layout)."""
    return header(version) + b"".join(b"\n" + line for line in lines)
