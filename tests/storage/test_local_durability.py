"""Local disk: what a write returned is still there after a power cut, bytes and name.

SIGKILL keeps the page cache, so only a power cut shows a missing fsync: each write below is
followed by one (``testing.power_cut``: only fsync'd bytes and names fsync'd into their
directory survive), and the file must be there with its bytes - the temp file's fsync before
the rename, the directory's after it, a new directory's in its parent.
"""

from __future__ import annotations

import os

import pytest

from streaming_exactly_once.storage.base import ByteRange
from streaming_exactly_once.storage.local import LocalStorage
from streaming_exactly_once.testing.power_cut import PowerCutDisk


@pytest.fixture
def disk(tmp_path):
    (tmp_path / "root").mkdir()
    with PowerCutDisk(tmp_path / "root") as d:
        yield d


@pytest.fixture
def storage(tmp_path):
    return LocalStorage(str(tmp_path / "root"))


def put_if_absent(s: LocalStorage) -> None:
    s.put_if_absent("_seo/wal/3", b"claim")


def atomic_write(s: LocalStorage) -> None:
    s.atomic_write("_seo/wal/3", b"claim")


def open_exclusive(s: LocalStorage) -> None:
    with s.open_exclusive("_seo/wal/3") as fh:
        fh.write(b"cl")
        fh.write(b"aim")


def put_composed_if_absent(s: LocalStorage) -> None:
    s.put_if_absent("_spark_metadata/2.compact", b"xxclaimxx")
    s.put_composed_if_absent("_seo/wal/3", [ByteRange("_spark_metadata/2.compact", 2, 3), b"im"])


def publish_prepared(s: LocalStorage) -> None:
    s.put_if_absent("_seo/wal/0", b"x")  # the directory exists, as a log's does
    with s.open_prepared("_seo/wal/.3.compact.e1.prep", append=False) as fh:
        fh.write(b"cla")
    s.put_if_absent("_seo/wal/1", b"im")
    s.append_range_prepared("_seo/wal/.3.compact.e1.prep", ByteRange("_seo/wal/1", 0, 2))
    s.sync_prepared("_seo/wal/.3.compact.e1.prep")
    s.publish_prepared("_seo/wal/.3.compact.e1.prep", "_seo/wal/3")


def open_write(s: LocalStorage) -> None:
    with s.open_write("_seo/wal/3") as fh:
        fh.write(b"claim")


def sync_of_a_file_written_elsewhere(s: LocalStorage) -> None:
    s.put_if_absent("_seo/wal/0", b"x")  # the directory, durably
    with open(os.path.join(s._abs("_seo/wal"), "3"), "wb") as fh:  # e.g. Spark's writer: no fsync
        fh.write(b"claim")
    s.sync(["_seo/wal/3"])


def rename_then_sync_names(s: LocalStorage) -> None:
    s.put_if_absent("_seo/staging/1-a/data/3", b"claim")  # synced bytes (the claim-time sync)
    s.rename("_seo/staging/1-a/data/3", "_seo/wal/3")  # a new directory: the first file of a partition
    s.sync(["_seo/wal/3"], contents=False)


WRITES = [
    put_if_absent,
    atomic_write,
    open_exclusive,
    put_composed_if_absent,
    publish_prepared,
    open_write,
    sync_of_a_file_written_elsewhere,
    rename_then_sync_names,
]


@pytest.mark.parametrize("write", WRITES, ids=[w.__name__ for w in WRITES])
def test_a_durable_write_survives_a_power_cut(disk, storage, tmp_path, write):
    write(storage)
    report = disk.power_cut()
    target = tmp_path / "root" / "_seo" / "wal" / "3"
    assert target.exists(), f"{write.__name__}: the new name did not survive the power cut ({report})"
    assert target.read_bytes() == b"claim", f"{write.__name__}: the bytes did not survive the power cut ({report})"


def test_without_sync_nothing_is_promised(disk, storage, tmp_path):
    """The model is not lenient: the same put through ``without_sync`` is lost."""
    storage.put_if_absent("_seo/wal/0", b"x")
    storage.without_sync().put_if_absent("_seo/wal/3", b"claim")
    disk.power_cut()
    assert not (tmp_path / "root" / "_seo" / "wal" / "3").exists()


def test_a_file_put_in_a_directory_made_by_makedirs_survives(disk, storage, tmp_path):
    """The sink makes each attempt's staging directory with ``makedirs`` and then puts its files
    (or intents) there durably: the files must not vanish with a directory whose own name was
    never made durable in its parent."""
    storage.put_if_absent("_seo/wal/0", b"x")
    storage.makedirs("_seo/staging/1-a")
    storage.put_if_absent("_seo/staging/1-a/intents/part-0", b"p=a/part-0")
    report = disk.power_cut()
    assert (tmp_path / "root" / "_seo" / "staging" / "1-a" / "intents" / "part-0").exists(), report


def test_a_directory_another_process_made_is_made_durable_before_a_file_lands_in_it(disk, storage, tmp_path):
    """A writer killed between making a partition directory and syncing its name into the table
    root leaves a directory that exists but is not durable; the next writer's file in it must
    not vanish with it."""
    storage.put_if_absent("_seo/wal/0", b"x")
    os.makedirs(tmp_path / "root" / "p=b")  # the dead writer's: no fsync of the root
    storage.put_if_absent("_seo/staging/1-a/part-0", b"claim")
    storage.rename("_seo/staging/1-a/part-0", "p=b/part-0")
    storage.sync(["p=b/part-0"], contents=False)
    report = disk.power_cut()
    assert (tmp_path / "root" / "p=b" / "part-0").read_bytes() == b"claim", report


def test_a_failed_fsync_of_a_new_directorys_parent_is_not_trusted_on_the_retry(disk, storage, tmp_path):
    """The EIO reaches the caller, and the retry finds the directory still to be made durable."""
    storage.put_if_absent("_seo/wal/0", b"x")
    disk.fail_fsync(r"^$", kind="dir")  # the next fsync of the root: the one for p=b's name
    with pytest.raises(OSError):
        storage.put_if_absent("p=b/part-0", b"claim")
    storage.put_if_absent("p=b/part-0", b"claim")
    report = disk.power_cut()
    assert (tmp_path / "root" / "p=b" / "part-0").read_bytes() == b"claim", report


def test_forgetting_directories_while_another_thread_makes_some_does_not_raise(tmp_path):
    """The janitor's thread forgets deleted staging directories while the commit's thread records
    new durable ones: the forgetting must not iterate the record as it changes."""
    import threading

    from streaming_exactly_once.storage import local

    errors: list[BaseException] = []

    recording = threading.Thread(target=lambda: [local._DURABLE_DIRS.__setitem__(f"{tmp_path}/made/{i}", i) for i in range(200_000)])

    def forget() -> None:
        try:
            while recording.is_alive():
                local._DURABLE_DIRS[f"{tmp_path}/gone"] = 1
                local.forget_durable_dirs(f"{tmp_path}/gone")
        except RuntimeError as exc:
            errors.append(exc)

    threads = [recording, threading.Thread(target=forget)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for key in [k for k in list(local._DURABLE_DIRS) if k.startswith(str(tmp_path))]:
            local._DURABLE_DIRS.pop(key, None)
    assert errors == []
