"""``raw_body`` checks a compact file's lines without splitting them (#14, memory): it must accept
and refuse exactly the files the line-by-line check did, and return the same bytes."""

from __future__ import annotations

import itertools

import pytest

from streaming_exactly_once.errors import LogCorruptError
from streaming_exactly_once.log.codec import DictCodec
from streaming_exactly_once.log.compactible_log import CompactibleLog


def line_by_line(data: bytes) -> bytes | None:
    """The specification: the body after the header line, without the last newline, if every
    line is ``{...}``; None if a line is not (then the strict decoder decides)."""
    newline = data.find(b"\n")
    if newline < 0:
        return b""
    body = data[newline:]
    if body.endswith(b"\n"):
        body = body[:-1]
    lines = body[1:].split(b"\n")
    return body if all(line[:1] == b"{" and line[-1:] == b"}" for line in lines) else None


PIECES = [b'{"a":1}', b"{}", b"", b"{", b"}", b"}{", b'{"s":"}\\n{"}', b" {}", b"{} "]


def bodies():
    for n in range(4):
        for lines in itertools.product(PIECES, repeat=n):
            for trailing in (b"", b"\n"):
                yield b"v1" + b"".join(b"\n" + line for line in lines) + trailing
    yield b"v1"


@pytest.mark.parametrize("compact", [False, True])
def test_raw_body_accepts_and_refuses_what_the_line_check_did(memory_storage, compact):
    log = CompactibleLog(memory_storage, "c", DictCodec(), default_interval=3)
    batch = 2 if compact else 1  # 2.compact or the delta 1
    checked = 0
    for data in bodies():
        memory_storage.delete(log.path(batch))
        memory_storage.put_if_absent(log.path(batch), data)
        expected = line_by_line(data)
        try:
            got = bytes(log.raw_body(batch, context="test"))
        except LogCorruptError:
            assert expected is None, data  # refused only where a line is not an object
            continue
        if expected is not None:
            assert got == expected, data
        else:  # the line check sent it to the strict decoder: only if that accepts it, same bytes
            log.decode(data, batch_id=batch)  # raises if the old check would have refused the file
            assert got == data[data.find(b"\n") :].removesuffix(b"\n"), data
        checked += 1
    assert checked > 50
