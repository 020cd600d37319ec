"""The reader index of a compact file this writer wrote is the previous index + the records
after it, not a parse of the whole file again - and exactly what that parse gives, else it is
parsed."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming_exactly_once.manifest import manifest_index
from streaming_exactly_once.manifest.entry import ManifestEntry
from streaming_exactly_once.manifest.manifest_index import index_path, read_index, write_index
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage


def _entries(batch, n=5):
    out = [ManifestEntry.for_file(f"file:///t/day={batch % 3}/part-{batch:05d}-{i}.parquet", size=100 + i, modification_time=batch) for i in range(n)]
    if batch % 3 == 1:  # Spark's manifest may hold directory entries: in the file, not in the index
        out.append(ManifestEntry(path=f"file:///t/dir-{batch}", size=0, is_dir=True, modification_time=batch))
    return out


@pytest.fixture
def extended(monkeypatch):
    """Which indexes were extended (True) or tried and then parsed (False), by compact batch id;
    one this writer did not write is parsed untried."""
    used: dict[int, bool] = {}
    real = manifest_index._extended_index

    def spy(storage, compact_id, log_, schema, info):
        found = real(storage, compact_id, log_, schema, info)
        used[compact_id] = found is not None
        return found

    monkeypatch.setattr(manifest_index, "_extended_index", spy)
    return used


def _parsed(storage, compact_id):
    """The index a fresh parse of the compact file gives (``seo index``'s way)."""
    fresh = ManifestLog(storage, default_interval=4)
    storage.delete(index_path(compact_id))
    assert write_index(storage, compact_id, fresh)
    data = storage.read_bytes(index_path(compact_id))
    return read_index(storage, compact_id, fresh), manifest_index._read_footer(pq.read_metadata(pa.BufferReader(data)))


def _footer(storage, compact_id):
    return manifest_index._read_footer(pq.read_metadata(pa.BufferReader(storage.read_bytes(index_path(compact_id)))))


KEYS = ("seo.source", "seo.source.size", "seo.source.mtime", "seo.source.entries", "seo.source.files", "seo.source.line_ends")


def test_an_extended_index_is_the_index_a_parse_gives(tmp_path, extended, monkeypatch):
    monkeypatch.setattr(manifest_index, "ROW_GROUP_ROWS", 16)
    storage = open_storage(str(tmp_path))
    log = ManifestLog(storage, default_interval=4)
    for b in range(16):
        log.add(b, _entries(b))
        if b % 4 == 3:
            assert write_index(storage, b, log)
    assert extended == {3: False, 7: True, 11: True, 15: True}
    for compact_id in (7, 11, 15):
        table = read_index(storage, compact_id, log)
        footer = _footer(storage, compact_id)
        assert table is not None and table.num_rows == len(log.files(compact_id))
        parsed, parsed_footer = _parsed(storage, compact_id)
        assert table.equals(parsed)
        assert {k: footer[k] for k in KEYS} == {k: parsed_footer[k] for k in KEYS}
    meta = pq.read_metadata(pa.BufferReader(storage.read_bytes(index_path(15))))
    assert meta.num_rows == 80 and meta.num_row_groups <= 80 // 16 + 1  # merged, not one per compaction


def test_without_a_usable_previous_index_the_file_is_parsed(tmp_path, extended):
    storage = open_storage(str(tmp_path))
    log = ManifestLog(storage, default_interval=4)
    for b in range(8):
        log.add(b, _entries(b))
    assert write_index(storage, 7, log)  # compact 3 has no index
    assert extended[7] is False
    assert write_index(storage, 3, log)
    data = storage.read_bytes(index_path(3))
    storage.delete(index_path(3))
    storage.put_if_absent(index_path(3), data[: len(data) // 2] + b"x" * (len(data) - len(data) // 2))  # damaged
    storage.delete(index_path(7))
    assert write_index(storage, 7, log)
    assert extended[7] is False
    assert read_index(storage, 7, log).num_rows == len(log.files(7))


def test_a_compact_file_this_writer_did_not_write_or_that_changed_is_parsed(tmp_path, extended):
    import os

    storage = open_storage(str(tmp_path))
    log = ManifestLog(storage, default_interval=4)
    for b in range(12):
        log.add(b, _entries(b))
        if b == 3:
            assert write_index(storage, 3, log)
    other = ManifestLog(open_storage(str(tmp_path)), default_interval=4)  # a writer that took over
    assert write_index(storage, 7, other)
    assert not extended.get(7)
    # rewritten at rest with other records of the same length, mtime set back: not what it wrote
    path = tmp_path / "_spark_metadata" / "11.compact"
    before = os.stat(path)
    path.write_bytes(path.read_bytes().replace(b"part-00009-4", b"part-00009-9"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert write_index(storage, 11, log)
    assert not extended.get(11)
    assert "file:///t/day=0/part-00009-9.parquet" in read_index(storage, 11, log).column("path").to_pylist()


def test_a_previous_compact_file_with_crlf_line_ends_is_parsed(tmp_path, extended):
    storage = open_storage(str(tmp_path))
    meta = tmp_path / "_spark_metadata"
    meta.mkdir()
    lines = [e for b in range(4) for e in _entries(b)]
    log = ManifestLog(storage, default_interval=4)
    body = b"\r\n".join(_json(log, e) for e in lines)
    (meta / "3.compact").write_bytes(b"v1\r\n" + body)
    assert write_index(storage, 3, log)
    assert _footer(storage, 3)["seo.source.line_ends"] == "crlf"
    for b in range(4, 8):
        log.add(b, _entries(b))
    assert write_index(storage, 7, log)
    assert not extended.get(3) and extended[7] is False  # tried, and refused
    assert read_index(storage, 7, log).num_rows == len(log.files(7))


def _json(log, entry):
    import json

    return json.dumps(log.codec.to_json(entry), separators=(",", ":")).encode()


def test_an_index_of_a_compact_file_replaced_at_the_same_size_and_mtime_is_not_used(tmp_path):
    """``cp -p`` or a restore puts a file of the same size back with its mtime: the index of the
    file that was there must not vouch for it (its inode or status-change time differ), so
    readers read the new file as Spark does."""
    import os
    import shutil

    storage = open_storage(str(tmp_path))
    log = ManifestLog(storage, default_interval=4)
    for b in range(4):
        log.add(b, _entries(b))
    assert write_index(storage, 3, log)
    assert read_index(storage, 3, log) is not None
    inode, ctime = _footer(storage, 3)["seo.source.change"].split(":")  # the store's change token
    assert int(inode) == os.stat(tmp_path / "_spark_metadata" / "3.compact").st_ino and int(ctime) > 0
    path = tmp_path / "_spark_metadata" / "3.compact"
    other = tmp_path / "elsewhere"
    other.write_bytes(path.read_bytes().replace(b"part-00002-4", b"part-00002-9"))
    os.utime(other, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns))
    shutil.copy2(other, path.with_suffix(".tmp"))
    os.replace(path.with_suffix(".tmp"), path)  # same size, same mtime, another inode
    assert os.stat(path).st_size == os.stat(other).st_size and os.stat(path).st_mtime_ns == os.stat(other).st_mtime_ns
    assert read_index(storage, 3, log) is None  # before: the old file's index, one path wrong
