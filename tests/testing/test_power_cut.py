"""The power-cut model itself (``testing.power_cut``): what it keeps and loses, and its EIO.

Each test does the system calls by hand, fsyncs through ``storage.local``'s two functions (the
ones the model wraps), cuts the power and looks at the tree.
"""

from __future__ import annotations

import errno
import os

import pytest

from streaming_exactly_once.storage import local
from streaming_exactly_once.testing.power_cut import PowerCutDisk


def write(path, data: bytes, *, sync: bool = False, mode: str = "wb") -> None:
    with open(path, mode) as fh:
        fh.write(data)
        fh.flush()
        if sync:
            local._fsync_fd(fh.fileno())


def sync_dir(path) -> None:
    local._fsync_dir(str(path))


@pytest.fixture
def disk(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    with PowerCutDisk(root) as d:
        yield d


def test_what_was_there_when_the_model_started_is_durable(tmp_path):
    (tmp_path / "root" / "d").mkdir(parents=True)
    write(tmp_path / "root" / "d" / "old", b"before")
    with PowerCutDisk(tmp_path / "root") as disk:
        report = disk.power_cut()
    assert (tmp_path / "root" / "d" / "old").read_bytes() == b"before"
    assert not (report.vanished or report.reappeared or report.changed), report


def test_a_file_needs_its_bytes_and_its_name_synced(disk, tmp_path):
    root = tmp_path / "root"
    write(root / "both", b"kept", sync=True)
    write(root / "bytes-only", b"name lost", sync=True)
    write(root / "name-only", b"bytes lost")
    sync_dir(root)  # names both, bytes-only and name-only - not what follows
    os.unlink(root / "bytes-only")
    write(root / "bytes-only", b"x")  # a new file under an old name: unsynced
    write(root / "late", b"never named", sync=True)
    report = disk.power_cut()
    assert sorted(os.listdir(root)) == ["both", "bytes-only", "name-only"]
    assert (root / "both").read_bytes() == b"kept"
    assert (root / "bytes-only").read_bytes() == b"name lost"  # the synced file under it then
    assert (root / "name-only").read_bytes() == b""  # never synced: empty, as ext4 leaves it
    assert report.vanished == ["late"] and "name-only" in report.changed, report


def test_unsynced_bytes_come_back_as_nuls_when_asked(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    with PowerCutDisk(root, lost="nul") as disk:
        write(root / "f", b"abc")
        sync_dir(root)
        disk.power_cut()
    assert (root / "f").read_bytes() == b"\0\0\0"


def test_bytes_appended_after_the_last_fsync_are_lost(disk, tmp_path):
    root = tmp_path / "root"
    write(root / "f", b"synced", sync=True)
    sync_dir(root)
    write(root / "f", b"+appended", mode="ab")
    disk.power_cut()
    assert (root / "f").read_bytes() == b"synced"


def test_an_unsynced_unlink_or_rename_is_undone(disk, tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir()
    (root / "b").mkdir()
    write(root / "a" / "moved", b"m", sync=True)
    write(root / "a" / "deleted", b"d", sync=True)
    write(root / "a" / "deleted-for-good", b"g", sync=True)
    sync_dir(root)
    sync_dir(root / "a")
    os.rename(root / "a" / "moved", root / "b" / "moved")
    sync_dir(root / "b")  # the new name is durable, the old one's removal is not
    os.unlink(root / "a" / "deleted")
    os.unlink(root / "a" / "deleted-for-good")
    disk.power_cut()
    assert sorted(os.listdir(root / "a")) == ["deleted", "deleted-for-good", "moved"]
    assert (root / "b" / "moved").read_bytes() == (root / "a" / "moved").read_bytes() == b"m"
    assert os.stat(root / "b" / "moved").st_ino == os.stat(root / "a" / "moved").st_ino  # one file, two names
    os.unlink(root / "a" / "deleted-for-good")
    sync_dir(root / "a")
    disk.power_cut()
    assert sorted(os.listdir(root / "a")) == ["deleted", "moved"]


def test_a_new_directory_needs_its_parent_synced(disk, tmp_path):
    root = tmp_path / "root"
    (root / "new").mkdir()
    write(root / "new" / "f", b"x", sync=True)
    sync_dir(root / "new")
    disk.power_cut()
    assert os.listdir(root) == []


def test_a_reused_inode_number_is_another_file(disk, tmp_path):
    """ext4 hands a freed inode number to the next file at once: the old name, resurrected,
    must get the old file's bytes - not the bytes the new file was synced with."""
    root = tmp_path / "root"
    write(root / "old", b"old bytes", sync=True)
    sync_dir(root)
    ino = os.stat(root / "old").st_ino
    os.unlink(root / "old")
    reused = None
    for i in range(50):
        write(root / f"new{i}", b"new bytes", sync=True)
        if os.stat(root / f"new{i}").st_ino == ino:
            reused = i
            break
    disk.power_cut()
    assert (root / "old").read_bytes() == b"old bytes", f"inode reused by new{reused}"


def test_a_failed_fsync_loses_its_bytes_although_the_next_fsync_succeeds(disk, tmp_path):
    root = tmp_path / "root"
    sync_dir(root)
    disk.fail_fsync(r"^f$")
    with open(root / "f", "wb") as fh:
        fh.write(b"first")
        fh.flush()
        with pytest.raises(OSError) as info:
            local._fsync_fd(fh.fileno())
        assert info.value.errno == errno.EIO
        local._fsync_fd(fh.fileno())  # succeeds: the pages were marked clean
        fh.write(b"+later")
        fh.flush()
        local._fsync_fd(fh.fileno())
    sync_dir(root)
    assert [(e.path, e.ok) for e in disk.events if e.kind == "file"] == [("f", False), ("f", True), ("f", True)]
    disk.power_cut()
    assert (root / "f").read_bytes() == b"\0" * 5 + b"+later"  # what was written after the failure survives


def test_a_failed_directory_fsync_makes_nothing_durable(disk, tmp_path):
    root = tmp_path / "root"
    write(root / "f", b"x", sync=True)
    disk.fail_fsync(r"^$", kind="dir")
    with pytest.raises(OSError):
        sync_dir(root)
    disk.power_cut()
    assert os.listdir(root) == []
    write(root / "f", b"x", sync=True)
    sync_dir(root)  # the next one succeeds and counts
    disk.power_cut()
    assert os.listdir(root) == ["f"]


def test_the_nth_matching_fsync_fails_once(disk, tmp_path):
    root = tmp_path / "root"
    disk.fail_fsync(r"^x", nth=2)
    outcomes = []
    for i in range(3):
        try:
            write(root / f"x{i}", b"x", sync=True)
            outcomes.append(True)
        except OSError:
            outcomes.append(False)
    assert outcomes == [True, False, True]


def test_an_image_is_the_power_cut_of_that_instant(tmp_path):
    root = tmp_path / "root"
    with PowerCutDisk(root, keep=[r"(^|/)kept(/|$)"]) as disk:
        (root / "kept").mkdir()
        write(root / "kept" / "0.json", b"v0")  # kept as it was at the image, synced or not
        write(root / "a", b"a", sync=True)
        sync_dir(root)
        image = disk.image()
        write(root / "b", b"b", sync=True)
        write(root / "kept" / "1.json", b"v1")
        sync_dir(root)
        disk.power_cut(image)
    assert sorted(os.listdir(root)) == ["a", "kept"]
    assert os.listdir(root / "kept") == ["0.json"] and (root / "kept" / "0.json").read_bytes() == b"v0"


def test_what_a_native_library_writes_is_lost_unless_synced(disk, tmp_path):
    """delta-rs's log files are any files: their names reach the model with their directory's
    sync, their bytes only with their own - a Delta version the sink never synced is lost."""
    root = tmp_path / "root"
    (root / "_delta_log").mkdir()
    sync_dir(root)
    write(root / "_delta_log" / "0.json", b"v0", sync=True)
    write(root / "_delta_log" / "1.json", b"v1")
    sync_dir(root / "_delta_log")
    disk.power_cut()
    assert (root / "_delta_log" / "0.json").read_bytes() == b"v0"
    assert (root / "_delta_log" / "1.json").read_bytes() == b""


def test_only_paths_under_the_root_are_modelled_and_the_hooks_go_away(tmp_path):
    root, other = tmp_path / "root", tmp_path / "other"
    other.mkdir()
    real = (local._fsync_fd, local._fsync_dir)
    with PowerCutDisk(root) as disk:
        assert (local._fsync_fd, local._fsync_dir) != real
        write(other / "f", b"x", sync=True)
        sync_dir(other)
        assert disk.events == []
    assert (local._fsync_fd, local._fsync_dir) == real


def test_local_storage_writes_are_seen(disk, tmp_path):
    """The storage's own paths reach the model: a put_if_absent's temp file, then its directory."""
    storage = local.LocalStorage(str(tmp_path / "root"))
    storage.put_if_absent("d/x", b"payload")
    files = [e.path for e in disk.events if e.kind == "file"]
    dirs = [e.path for e in disk.events if e.kind == "dir"]
    assert len(files) == 1 and files[0].startswith("d/.x.") and files[0].endswith(".tmp"), disk.events
    assert dirs[-1] == "d" and "" in dirs, disk.events  # the new name; the new directory in the root
