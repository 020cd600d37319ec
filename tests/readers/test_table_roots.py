"""Which manifest entries are inside a table: every root it was written under, every spelling of a
root, and nothing that climbs out with ``..`` or through a symbolic link (reproducers r07, r09).

Real tables on disk written through the commit protocol (no Spark); readers through the API and
the ``seo`` command.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.errors import (
    ConfigError,
    IdentityError,
    InvalidAsOfError,
    ManifestEntryOutsideRootError,
    ReaderError,
    SymlinkOutsideRootError,
)
from streaming_exactly_once.log.record_file import encode_record
from streaming_exactly_once.manifest.entry import ManifestEntry
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.identity import TableIdentity, note_root, read_identity
from streaming_exactly_once.table.layout import TABLE_FILE
from tests.cli.test_cli import seo
from tests.readers.tables import commit_batch, committer, parquet_bytes, rows_of, write_table

LINE = '{"path":"%s","size":%d,"isDir":false,"modificationTime":1,"blockReplication":1,"blockSize":33554432,"action":"add"}'
SECRET = [424242, 434343]


def ids(path, **kw) -> list[int]:
    return sorted(read.arrow(str(path), **kw).column("id").to_pylist())


@pytest.fixture
def with_secret(tmp_path):
    """A table of two batches at <tmp>/t, and a Parquet file outside it at <tmp>/secret/s.parquet."""
    root = tmp_path / "t"
    write_table(str(root))
    (tmp_path / "secret").mkdir()
    secret = tmp_path / "secret" / "s.parquet"
    secret.write_bytes(parquet_bytes(SECRET))
    return root, secret


def add_entry(root: Path, path: str, size: int) -> None:
    """Append a manifest batch listing ``path`` (a hand-made entry, as a tool or an attacker would)."""
    (root / "_spark_metadata" / "2").write_text("v1\n" + LINE % (path, size))


# --- r07: '..' and symbolic links ------------------------------------------------------------


@pytest.mark.parametrize(
    "entry", ["{root}/../secret/s.parquet", "{root}/p=a/%2E%2E%2F%2E%2E%2Fsecret/s.parquet", "{root}/p=a/..%2F../secret/s.parquet"]
)
def test_dot_dot_entries_are_outside_the_root(capsys, with_secret, entry):
    root, secret = with_secret
    add_entry(root, "file://" + entry.format(root=root), secret.stat().st_size)
    for call in (lambda: read.files(str(root)), lambda: read.arrow(str(root)), lambda: read.files(str(root), verify=True)):
        with pytest.raises(ManifestEntryOutsideRootError, match="outside the table root"):
            call()
    for command in ("files", "read"):
        code, out, err = seo(capsys, command, str(root))
        assert code == 1 and "424242" not in out and err.startswith("error: ") and err.count("\n") == 1, (out, err)
    # explicitly allowed: the entry is read where it really is, spelled without '..'
    assert read.files(str(root), allow_outside_root=True)[-1] == f"file://{secret}"
    assert ids(root, allow_outside_root=True) == sorted(rows_of(0) + rows_of(1) + SECRET)


def test_dot_dot_that_stays_inside_is_normalised(with_secret):
    root, _ = with_secret
    target = next((root / "p=a").iterdir())
    add_entry(root, f"file://{root}/p=b/../p=a/{target.name}", target.stat().st_size)
    assert read.files(str(root))[-1] == f"file://{root}/p=a/{target.name}"


@pytest.mark.parametrize("linked", ["file", "directory"])
def test_symlinks_out_of_the_table_are_refused_when_files_are_verified(capsys, with_secret, linked):
    root, secret = with_secret
    if linked == "file":
        (root / "p=a" / "evil.parquet").symlink_to(secret)
        add_entry(root, f"file://{root}/p=a/evil.parquet", secret.stat().st_size)
    else:
        (root / "p=evil").symlink_to(secret.parent)
        add_entry(root, f"file://{root}/p=evil/s.parquet", secret.stat().st_size)
    assert len(read.files(str(root))) == 5  # listing URIs reads nothing
    for call in (lambda: read.files(str(root), verify=True), lambda: read.arrow(str(root)), lambda: read.pandas(str(root))):
        with pytest.raises(SymlinkOutsideRootError, match="symbolic link") as err:
            call()
        assert isinstance(err.value, ManifestEntryOutsideRootError) and str(secret) in str(err.value)
    for command in ("files", "read"):
        code, out, err = seo(capsys, command, str(root))
        assert code == 1 and "424242" not in out and "symbolic link" in err and err.count("\n") == 1, (out, err)
    assert ids(root, allow_outside_root=True) == sorted(rows_of(0) + rows_of(1) + SECRET)


def test_symlinks_inside_the_table_are_fine(with_secret):
    root, _ = with_secret
    target = next((root / "p=a").iterdir())
    (root / "p=a" / "alias.parquet").symlink_to(target)
    add_entry(root, f"file://{root}/p=a/alias.parquet", target.stat().st_size)
    assert len(read.arrow(str(root))) == 25


# --- r09: every root the table was written under -----------------------------------------------


def written_through_both_spellings(link: Path, real: Path) -> None:
    """A table an earlier release let write through a symlink and through the real path: the
    second spelling recorded as another root (``note_root``), a batch under each."""
    c = committer(str(link))
    commit_batch(c, 0, rows_of(0))
    c.close()
    note_root(open_storage(str(real)), read_identity(open_storage(str(link))))
    c = committer(str(real))
    commit_batch(c, 1, rows_of(1))
    c.close()


def test_table_written_through_a_symlink_and_the_real_path(tmp_path):
    real = tmp_path / "disk1" / "events"
    real.mkdir(parents=True)
    link = tmp_path / "events"
    link.symlink_to(real)
    written_through_both_spellings(link, real)
    assert ids(link) == ids(real) == rows_of(0) + rows_of(1)
    assert all(u.startswith(f"file://{link}/") for u in read.files(str(link)))


@pytest.mark.parametrize("first", ["link", "real"])
def test_a_writer_at_another_spelling_of_the_same_directory_is_refused_before_it_writes(tmp_path, first):
    """Batches written through a symlink would be listed under a second root, which Spark's
    readers leave out (spark.read of the first spelling would miss their rows): refused, the
    table untouched and its lease free, naming the spelling to use."""
    real = tmp_path / "disk1" / "events"
    real.mkdir(parents=True)
    link = tmp_path / "events"
    link.symlink_to(real)
    used, other = (link, real) if first == "link" else (real, link)
    c = committer(str(used))
    commit_batch(c, 0, rows_of(0))
    c.close()
    before = {p: p.read_bytes() for p in real.rglob("*") if p.is_file()}
    with pytest.raises(IdentityError, match=rf"{other} is the table file://{used} reached through a symbolic link.*as file://{used}\."):
        committer(str(other)).ensure_open()
    after = {p: p.read_bytes() for p in real.rglob("*") if p.is_file() and "heartbeats" not in p.parts and "epochs" not in p.parts}
    assert after == {p: b for p, b in before.items() if "heartbeats" not in p.parts and "epochs" not in p.parts}
    c = committer(str(used))  # the lease is free: the recorded spelling writes at once
    commit_batch(c, 1, rows_of(1))
    c.close()
    assert ids(used) == rows_of(0) + rows_of(1)


def test_moved_table_written_at_its_new_place(tmp_path):
    old, new = tmp_path / "old" / "events", tmp_path / "new" / "events"
    write_table(str(old), batches=1)
    new.parent.mkdir()
    shutil.move(str(old), str(new))
    assert ids(new) == rows_of(0)
    c = committer(str(new))
    commit_batch(c, 1, rows_of(1))
    c.close()
    assert ids(new) == rows_of(0) + rows_of(1)


def _identity(root_uri: str, others: tuple[str, ...] = ()) -> TableIdentity:
    return TableIdentity("t-1", root_uri, 1, 10, "parquet", ("p",), other_root_uris=others)


def _memory_table(memory_storage, root_uri: str, entries: list[str], others: tuple[str, ...] = ()):
    memory_storage.put_if_absent(TABLE_FILE, encode_record(_identity(root_uri, others).to_json()))
    ManifestLog(memory_storage).add(0, [ManifestEntry(path=e, size=1, modification_time=1) for e in entries])
    return memory_storage.root_uri


def test_s3_s3a_s3n_spellings_are_one_root(memory_storage):
    root = _memory_table(
        memory_storage, "s3://bucket/t", ["s3a://bucket/t/p=a/x.parquet", "s3n://bucket/t/p=b/y.parquet", "s3://bucket/t/p=c/z.parquet"]
    )
    assert read.files(root) == [f"{root}/p=a/x.parquet", f"{root}/p=b/y.parquet", f"{root}/p=c/z.parquet"]


def test_file_uri_spellings_are_one_root(memory_storage):
    root = _memory_table(
        memory_storage, "file:/data/t", ["file:/data/t/p=a/x.parquet", "file:///data/t/p=b/y.parquet", "file://localhost/data/t/p=c/z.parquet"]
    )
    assert read.files(root) == [f"{root}/p=a/x.parquet", f"{root}/p=b/y.parquet", f"{root}/p=c/z.parquet"]


def test_recorded_other_roots_are_inside_and_others_are_not(memory_storage):
    entries = ["s3://old/t/p=a/x.parquet", "s3a://new/t/p=a/y.parquet"]
    root = _memory_table(memory_storage, "s3://old/t", entries, others=("s3://new/t",))
    assert read.files(root) == [f"{root}/p=a/x.parquet", f"{root}/p=a/y.parquet"]
    ManifestLog(memory_storage).add(1, [ManifestEntry(path="s3://new/t2/p=a/z.parquet", size=1, modification_time=1)])
    with pytest.raises(ManifestEntryOutsideRootError, match="any of s3://old/t, s3://new/t"):
        read.files(root)
    ManifestLog(memory_storage).add(2, [ManifestEntry(path="s3://new/t/p=a/%2E%2E/%2E%2E/t2/z.parquet", size=1, modification_time=1)])
    with pytest.raises(ManifestEntryOutsideRootError):
        read.files(root, as_of=2)


# --- as_of ------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_of", [-1, True, "1", 1.5, 2, 10**30])
def test_as_of_that_is_no_batch_is_a_named_error(capsys, tmp_path, as_of):
    """r16: as_of=-1 raised a bare ValueError from the compaction arithmetic."""
    root = tmp_path / "t"
    write_table(str(root))
    for call in (read.files, read.arrow):
        with pytest.raises(InvalidAsOfError, match="as_of") as err:
            call(str(root), as_of=as_of)
        assert isinstance(err.value, (ReaderError, ConfigError, ValueError))
    assert len(read.arrow(str(root), as_of=1)) == 20
    if isinstance(as_of, int) and not isinstance(as_of, bool):
        code, _, err = seo(capsys, "files", str(root), "--as-of", str(as_of))
        assert code == 1 and err.startswith("error: as_of") and err.count("\n") == 1, err


def test_files_and_read_of_the_cli_check_what_they_list(capsys, tmp_path):
    root = tmp_path / "t"
    write_table(str(root))
    victim = next((root / "p=a").iterdir())
    victim.unlink()
    code, _, err = seo(capsys, "files", str(root))
    assert code == 1 and "does not exist" in err
    code, out, _ = seo(capsys, "files", "--no-verify", str(root))
    assert code == 0 and victim.name in out
    assert os.path.exists(root)


def test_a_read_lists_the_manifest_and_the_commits_log_once(tmp_path, monkeypatch):
    """#17: one read opened the logs twice and listed ``_spark_metadata`` (and the commits log)
    again for each; every directory is now listed once per read, compaction included."""
    from collections import Counter

    from streaming_exactly_once import read
    from streaming_exactly_once.storage.local import LocalStorage
    from tests.readers.tables import write_table

    rows = write_table(str(tmp_path / "t"), batches=12)  # 9.compact + deltas 10, 11
    listed: Counter[str] = Counter()
    real_list_dir = LocalStorage.list_dir

    def counting_list_dir(self, path=""):
        listed[path] += 1
        return real_list_dir(self, path)

    monkeypatch.setattr(LocalStorage, "list_dir", counting_list_dir)
    assert len(read.files(str(tmp_path / "t"))) == 2 * 12
    assert read.arrow(str(tmp_path / "t")).num_rows == len(rows)
    assert set(listed.values()) == {2}, listed  # once per read, two reads
    assert {"_spark_metadata", "_seo/commits"} <= set(listed)
