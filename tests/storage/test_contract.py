"""The storage contract (``storage.base``), run unchanged on memory, local disk and S3 (moto)."""

from __future__ import annotations

import pickle
import threading
import time

import pytest

from streaming_exactly_once.errors import ComposedSourceError
from streaming_exactly_once.storage.base import ByteRange, ComposedFiles, FileInfo, PreparedFiles, composed_files, prepared_files


def names(storage, path=""):
    return sorted(e.name for e in storage.list_dir(path))


class TestPutIfAbsent:
    def test_creates_then_refuses(self, storage):
        storage.put_if_absent("d/a", b"first")
        with pytest.raises(FileExistsError):
            storage.put_if_absent("d/a", b"second")
        assert storage.read_bytes("d/a") == b"first"
        assert names(storage, "d") == ["a"]

    def test_race_has_exactly_one_winner_and_leaves_no_temp_files(self, storage):
        winners, losers, errors = [], [], []
        barrier = threading.Barrier(16)

        def attempt(i: int) -> None:
            barrier.wait()
            try:
                storage.put_if_absent("race/target", b"writer-%d" % i)
                winners.append(i)
            except FileExistsError:
                losers.append(i)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=attempt, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(winners) == 1 and len(losers) == 15
        assert storage.read_bytes("race/target") == b"writer-%d" % winners[0]
        assert names(storage, "race") == ["target"]

    def test_empty_payload_is_a_real_file(self, storage):
        storage.put_if_absent("empty", b"")
        assert storage.read_bytes("empty") == b""
        with pytest.raises(FileExistsError):
            storage.put_if_absent("empty", b"x")


class TestOpenExclusive:
    def test_publishes_on_clean_exit_only(self, storage):
        with storage.open_exclusive("s/ok") as fh:
            fh.write(b"part1-")
            assert not storage.exists("s/ok")
            fh.write(b"part2")
        assert storage.read_bytes("s/ok") == b"part1-part2"

    def test_exception_leaves_nothing(self, storage):
        with pytest.raises(RuntimeError):
            with storage.open_exclusive("s/bad") as fh:
                fh.write(b"half")
                raise RuntimeError("writer died")
        assert not storage.exists("s/bad")
        assert [n for n in names(storage, "s") if "bad" in n] == []

    def test_refuses_existing(self, storage):
        storage.put_if_absent("s/x", b"1")
        with pytest.raises(FileExistsError):
            with storage.open_exclusive("s/x") as fh:
                fh.write(b"2")
        assert storage.read_bytes("s/x") == b"1"


class TestAtomicWrite:
    def test_replaces(self, storage):
        storage.atomic_write("w/f", b"old")
        storage.atomic_write("w/f", b"new")
        assert storage.read_bytes("w/f") == b"new"
        assert names(storage, "w") == ["f"]

    def test_readers_never_see_a_mix(self, storage):
        payloads = [bytes([65 + i]) * 20_000 for i in range(5)]
        storage.atomic_write("w/big", payloads[0])
        seen, stop = set(), threading.Event()

        def reader() -> None:
            while not stop.is_set():
                seen.add(storage.read_bytes("w/big"))

        t = threading.Thread(target=reader)
        t.start()
        for i in range(25):
            storage.atomic_write("w/big", payloads[i % 5])
        stop.set()
        t.join()
        assert seen <= set(payloads)


class TestRename:
    def test_moves(self, storage):
        storage.put_if_absent("r/src", b"data")
        storage.rename("r/src", "r/sub/dst")
        assert storage.read_bytes("r/sub/dst") == b"data"
        assert not storage.exists("r/src")

    def test_never_overwrites(self, storage):
        storage.put_if_absent("r/a", b"a")
        storage.put_if_absent("r/b", b"b")
        with pytest.raises(FileExistsError):
            storage.rename("r/a", "r/b")
        assert storage.read_bytes("r/b") == b"b"
        assert storage.read_bytes("r/a") == b"a"

    def test_missing_source(self, storage):
        with pytest.raises(FileNotFoundError):
            storage.rename("r/nope", "r/dst")


class TestReadsAndListing:
    def test_missing_file(self, storage):
        with pytest.raises(FileNotFoundError):
            storage.read_bytes("no/such/file")
        with pytest.raises(FileNotFoundError):
            storage.info("no/such/file")
        assert not storage.exists("no/such/file")
        assert storage.list_dir("no/such/dir") == []

    def test_list_dir_and_walk(self, storage):
        storage.put_if_absent("t/a", b"123")
        storage.put_if_absent("t/sub/b", b"12345")
        listing = {e.name: e for e in storage.list_dir("t")}
        assert set(listing) == {"a", "sub"}
        assert listing["a"] == FileInfo("t/a", 3, listing["a"].mtime_ms, False)
        assert listing["sub"].is_dir
        walked = {e.path: e.size for e in storage.walk_files("t")}
        assert walked == {"t/a": 3, "t/sub/b": 5}

    def test_hidden_files_lists_only_names_starting_with_a_dot(self, storage):
        for path in ("h/a", "h/.a.tmp", "h/sub/b", "h/sub/.b.prep"):
            storage.put_if_absent(path, b"123")
        assert {e.path: e.size for e in storage.hidden_files("h")} == {"h/.a.tmp": 3, "h/sub/.b.prep": 3}
        assert [e.path for e in storage.hidden_files("h", recursive=False)] == ["h/.a.tmp"]
        assert list(storage.hidden_files("no/such/dir")) == []

    def test_info_has_a_real_mtime(self, storage):
        before = int(time.time() * 1000) - 60_000
        storage.put_if_absent("m/f", b"x")
        info = storage.info("m/f")
        assert info.size == 1 and not info.is_dir
        assert before < info.mtime_ms < before + 180_000

    def test_delete_and_delete_tree(self, storage):
        storage.put_if_absent("del/a", b"1")
        storage.put_if_absent("del/sub/b", b"2")
        storage.delete("del/a")
        storage.delete("del/a")  # missing_ok
        with pytest.raises(FileNotFoundError):
            storage.delete("del/a", missing_ok=False)
        storage.delete_tree("del")
        assert list(storage.walk_files("del")) == []
        storage.delete_tree("del")  # already gone: fine

    def test_paths_cannot_escape_the_root(self, storage):
        with pytest.raises(ValueError):
            storage.read_bytes("../etc/passwd")
        with pytest.raises(ValueError):
            storage.put_if_absent("/abs", b"x")

    def test_child_shares_backend(self, storage):
        child = storage.child("c")
        child.put_if_absent("f", b"via child")
        assert storage.read_bytes("c/f") == b"via child"
        assert child.uri("f") == storage.uri("c/f")

    def test_uri_is_fully_qualified(self, storage):
        uri = storage.uri("x/y")
        assert "://" in uri and uri.endswith("/x/y")


class TestPartialReads:
    """``read_head``/``read_tail``: how logs read a file's version line and a compact file's end."""

    def test_head_and_tail(self, storage):
        storage.put_if_absent("part/f", b"0123456789")
        assert storage.read_head("part/f", 4) == b"0123"
        assert storage.read_tail("part/f", 3) == b"789"
        assert storage.read_head("part/f", 0) == b""
        assert storage.read_tail("part/f", 0) == b""

    def test_longer_than_the_file_gives_the_whole_file(self, storage):
        storage.put_if_absent("part/short", b"abc")
        assert storage.read_head("part/short", 100) == b"abc"
        assert storage.read_tail("part/short", 100) == b"abc"
        storage.put_if_absent("part/empty", b"")
        assert storage.read_head("part/empty", 10) == b""
        assert storage.read_tail("part/empty", 10) == b""

    def test_missing_file(self, storage):
        with pytest.raises(FileNotFoundError):
            storage.read_head("part/none", 1)
        with pytest.raises(FileNotFoundError):
            storage.read_tail("part/none", 1)
        with pytest.raises(FileNotFoundError):
            storage.read_tail_synced("part/none", 1)

    def test_tail_synced_reads_the_tail(self, storage):
        """``read_tail_synced``: the sink's rename writer reads a staged file's footer this way."""
        storage.put_if_absent("part/s", b"0123456789")
        assert storage.read_tail_synced("part/s", 3) == b"789"
        assert storage.read_tail_synced("part/s", 100) == b"0123456789"


class TestOpenWrite:
    """``open_write``: direct mode's data files (the manifest decides their visibility)."""

    def test_streams_into_a_new_file_with_parents(self, storage):
        chunk = bytes(range(256)) * 1024
        with storage.open_write("ow/p=1/q=2/part-0") as fh:
            for _ in range(5):
                fh.write(chunk)
        assert storage.read_bytes("ow/p=1/q=2/part-0") == chunk * 5
        assert storage.info("ow/p=1/q=2/part-0").size == len(chunk) * 5

    def test_refuses_an_existing_file(self, storage):
        storage.put_if_absent("ow/x", b"committed")
        with pytest.raises(FileExistsError):
            with storage.open_write("ow/x") as fh:
                fh.write(b"other")
        assert storage.read_bytes("ow/x") == b"committed"


class TestDurability:
    def test_sync_and_makedirs_keep_what_is_there(self, storage):
        storage.makedirs("dur/a/b")
        storage.makedirs("dur/a/b")  # again: fine
        storage.put_if_absent("dur/a/b/f", b"1")
        storage.put_if_absent("dur/a/g", b"2")
        storage.sync(["dur/a/b/f", "dur/a/g"])
        storage.sync([])
        assert storage.read_bytes("dur/a/b/f") == b"1" and storage.read_bytes("dur/a/g") == b"2"


class TestPreparedFiles:
    """Background compaction builds a file by appends under a work name, then publishes it.

    An optional capability (``PreparedFiles``): a backend without it says so
    (``supports_prepared_files``) and has none of its methods; every backend with it passes these."""

    def test_capability_is_declared_and_matches_the_methods(self, storage):
        prep = prepared_files(storage)
        assert (prep is not None) == storage.supports_prepared_files
        if prep is None:
            assert not hasattr(storage, "open_prepared") and not hasattr(storage, "publish_prepared")
        else:
            assert isinstance(storage, PreparedFiles)

    def test_appends_then_publishes_without_replacing(self, storage):
        prep = prepared_files(storage)
        if prep is None:
            return  # not this backend's capability: see the test above
        with prep.open_prepared("prep/.w", append=False) as fh:
            fh.write(b"head")
        with prep.open_prepared("prep/.w", append=True) as fh:
            fh.write(b"+tail")
        prep.sync_prepared("prep/.w")
        prep.publish_prepared("prep/.w", "prep/final")
        assert storage.read_bytes("prep/final") == b"head+tail"
        assert not storage.exists("prep/.w")

    def test_create_truncates_and_append_never_recreates(self, storage):
        prep = prepared_files(storage)
        if prep is None:
            return
        with prep.open_prepared("prep/.t", append=False) as fh:
            fh.write(b"a long first try")
        with prep.open_prepared("prep/.t", append=False) as fh:
            fh.write(b"new")
        prep.publish_prepared("prep/.t", "prep/t")
        assert storage.read_bytes("prep/t") == b"new"
        with prep.open_prepared("prep/.gone", append=False) as fh:
            fh.write(b"x")
        storage.delete("prep/.gone")
        with pytest.raises(FileNotFoundError):
            prep.open_prepared("prep/.gone", append=True)
        assert not storage.exists("prep/.gone")

    def test_appends_a_range_of_another_file(self, storage):
        prep = prepared_files(storage)
        if prep is None:
            return
        storage.put_if_absent("prep/src", b"v1\n{a}\n{b}\n")
        with prep.open_prepared("prep/.r", append=False) as fh:
            fh.write(b"")
        prep.append_range_prepared("prep/.r", ByteRange("prep/src", 0, 10))
        with prep.open_prepared("prep/.r", append=True) as fh:
            fh.write(b"\n{c}")
        prep.append_range_prepared("prep/.r", ByteRange("prep/src", 3, 3))
        prep.publish_prepared("prep/.r", "prep/r")
        assert storage.read_bytes("prep/r") == b"v1\n{a}\n{b}\n{c}{a}"
        with pytest.raises(FileNotFoundError):  # a deleted work file is never re-created
            prep.append_range_prepared("prep/.r", ByteRange("prep/src", 0, 2))
        assert not storage.exists("prep/.r")
        with prep.open_prepared("prep/.s", append=False) as fh:
            fh.write(b"ok")
        with pytest.raises(ComposedSourceError):
            prep.append_range_prepared("prep/.s", ByteRange("prep/src", 5, 100))

    def test_publish_refuses_an_existing_final_name(self, storage):
        prep = prepared_files(storage)
        if prep is None:
            return
        storage.put_if_absent("prep/taken", b"published by another writer")
        with prep.open_prepared("prep/.late", append=False) as fh:
            fh.write(b"late")
        with pytest.raises(FileExistsError):
            prep.publish_prepared("prep/.late", "prep/taken")
        assert storage.read_bytes("prep/taken") == b"published by another writer"


def test_local_and_s3_storage_pickle(local_storage, s3_storage):
    for st in (local_storage, s3_storage):
        st.put_if_absent("p", b"pickled")
        clone = pickle.loads(pickle.dumps(st))
        assert clone.read_bytes("p") == b"pickled"
        assert clone.root_uri == st.root_uri


class TestComposedFiles:
    """A create-if-absent of pieces, ranges of existing files copied by the storage itself.

    An optional capability (``ComposedFiles``): a backend without it says so
    (``supports_composed_files``); every backend with it passes these, which are promise 1 of
    the contract for a file whose bytes partly come from other files."""

    def test_capability_is_declared_and_matches_the_methods(self, storage):
        composed = composed_files(storage)
        assert (composed is not None) == storage.supports_composed_files
        if composed is None:  # absent, or switched off for this object (S3 unless asked for)
            assert not storage.supports_composed_files
        else:
            assert isinstance(storage, ComposedFiles)

    def test_pieces_are_concatenated_in_order(self, storage):
        composed = composed_files(storage)
        if composed is None:
            return
        storage.put_if_absent("cmp/src", b"0123456789")
        composed.put_composed_if_absent(
            "cmp/out", [ByteRange("cmp/src", 0, 10), b"-", ByteRange("cmp/src", 3, 4), memoryview(b"+end"), ByteRange("cmp/src", 9, 0)]
        )
        assert storage.read_bytes("cmp/out") == b"0123456789-3456+end"
        composed.put_composed_if_absent("cmp/only-bytes", [b"a", b"", b"b"])
        assert storage.read_bytes("cmp/only-bytes") == b"ab"

    def test_refuses_an_existing_file_and_leaves_it_alone(self, storage):
        composed = composed_files(storage)
        if composed is None:
            return
        storage.put_if_absent("cmp/src", b"source bytes")
        storage.put_if_absent("cmp/taken", b"another writer's")
        with pytest.raises(FileExistsError):
            composed.put_composed_if_absent("cmp/taken", [ByteRange("cmp/src", 0, 6), b"!"])
        assert storage.read_bytes("cmp/taken") == b"another writer's"
        assert sorted(e.name for e in storage.list_dir("cmp")) == ["src", "taken"]

    def test_a_range_past_the_end_creates_nothing(self, storage):
        composed = composed_files(storage)
        if composed is None:
            return
        storage.put_if_absent("cmp/short", b"only 10 b.")
        with pytest.raises(ComposedSourceError):
            composed.put_composed_if_absent("cmp/out", [b"head", ByteRange("cmp/short", 2, 20)])
        with pytest.raises(FileNotFoundError):
            composed.put_composed_if_absent("cmp/out", [ByteRange("cmp/missing", 0, 1)])
        assert [e.name for e in storage.list_dir("cmp")] == ["short"]

    def test_race_has_exactly_one_winner(self, storage):
        composed = composed_files(storage)
        if composed is None:
            return
        storage.put_if_absent("cmp/src", b"x" * 1000)
        results: list[str] = []

        def attempt(i: int) -> None:
            try:
                composed.put_composed_if_absent("cmp/race", [ByteRange("cmp/src", 0, 1000), str(i).encode()])
                results.append(f"won {i}")
            except FileExistsError:
                results.append("lost")

        threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [r for r in results if r.startswith("won")]
        assert len(winners) == 1 and results.count("lost") == 7
        assert storage.read_bytes("cmp/race") == b"x" * 1000 + winners[0].split()[1].encode()
        assert sorted(e.name for e in storage.list_dir("cmp")) == ["race", "src"]
