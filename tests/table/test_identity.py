"""``_seo/table`` keeps every root a table was written under (``note_root``), in bytes old
readers still read (reproducer r09: a table written through a symlink and the real path, or
moved and written at its new place)."""

from __future__ import annotations

import pytest

from streaming_exactly_once.errors import IdentityError, LogCorruptError
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.identity import TableIdentity, note_root, read_identity
from streaming_exactly_once.table.layout import TABLE_FILE
from tests.readers.tables import write_table


def test_note_root_records_each_new_root_once(tmp_path):
    first = open_storage(str(tmp_path / "a"))
    write_table(str(tmp_path / "a"), batches=1)
    identity = read_identity(first)
    assert note_root(first, identity) == identity  # its own root: nothing to record
    before = (tmp_path / "a" / "_seo" / "table").read_bytes()
    assert b"otherRootUris" not in before  # files of tables with one root keep their bytes
    (tmp_path / "b").symlink_to(tmp_path / "a")
    second = open_storage(str(tmp_path / "b"))
    noted = note_root(second, identity)
    assert noted.other_root_uris == (f"file://{tmp_path}/b",) and noted.root_uris == (identity.root_uri, f"file://{tmp_path}/b")
    data = (tmp_path / "a" / "_seo" / "table").read_bytes()
    assert data.startswith(before[:-1]) and data.endswith(b',"otherRootUris":["file://' + str(tmp_path).encode() + b'/b"]}')
    assert read_identity(first) == noted
    assert note_root(second, identity) == noted  # once only, even from a stale identity
    assert note_root(open_storage(f"file:{tmp_path}/b/"), noted) == noted  # another spelling of the same root


def test_identity_with_bad_other_roots_is_a_named_error(memory_storage):
    memory_storage.put_if_absent(
        TABLE_FILE, b'v1\n{"tableId":"t","rootUri":"file:///t","createdMs":1,"compactInterval":10,"format":"parquet","otherRootUris":[1]}'
    )
    with pytest.raises(LogCorruptError, match="otherRootUris"):
        read_identity(memory_storage)


def test_identity_without_other_roots_reads_as_before(memory_storage):
    old = b'v1\n{"tableId":"t","rootUri":"file:///t","createdMs":1,"compactInterval":10,"format":"parquet","partitionBy":["p"],"firstBatchId":0,"writerOptions":{}}'
    memory_storage.put_if_absent(TABLE_FILE, old)
    identity = read_identity(memory_storage)
    assert identity.other_root_uris == () and identity.root_uris == ("file:///t",)
    assert isinstance(identity, TableIdentity)


def test_note_root_refuses_another_tables_identity(tmp_path):
    write_table(str(tmp_path / "a"), batches=1)
    storage = open_storage(str(tmp_path / "a"))
    stranger = TableIdentity("another-table", "file:///elsewhere", 1, 10, "parquet")
    with pytest.raises(IdentityError, match="another table was created at this path"):
        note_root(storage, stranger)
