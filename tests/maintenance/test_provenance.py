"""``seo gc`` deletes only files the table's records show this sink wrote: what a compaction batch
left out of the listing (``retention``, a rewrite's replaced files) is recorded before the compact
file (``_seo/retired/N``), so gc deletes it after the manifest files naming it are gone; a file
another tool put in the table's directory is reported (gc ``foreign``, verify ``foreign-file``)
and kept, however old."""

from __future__ import annotations

import json
import os
import time
from collections import Counter

from streaming_exactly_once import read
from streaming_exactly_once.maintenance.gc import collect_garbage
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.manifest.retired import read_retired, retired_batches
from streaming_exactly_once.storage import open_storage
from tests.cli.test_cli import seo
from tests.maintenance.test_gc import data_files
from tests.readers.tables import commit_batch, committer, parquet_bytes, rows_of


def _named(storage) -> set[str]:
    """Every file a retained manifest file names (time travel included): what gc must keep."""
    manifest = ManifestLog(storage)
    return {e.uri.rsplit("/t/", 1)[-1] for b in manifest.list_batch_ids() for e in manifest.get(b)}


def test_gc_deletes_what_retention_retired_and_keeps_a_foreign_file(capsys, tmp_path):
    root = tmp_path / "t"
    c = committer(str(root), compact_interval=3, retention_ms=1, min_batches_to_retain=1, cleanup_delay_ms=0)
    for b in range(9):
        time.sleep(0.005)  # every earlier entry is older than retention at the next compaction batch
        commit_batch(c, b, rows_of(b))
        c.janitor.drain()
    c.close()
    storage = open_storage(str(root))
    live = {e.uri.rsplit("/t/", 1)[-1] for e in ManifestLog(storage).files()}
    assert retired_batches(storage) == [2, 5, 8]  # each compaction batch recorded what it left out
    assert {e.uri.rsplit("/t/", 1)[-1] for r in read_retired(storage) for e in r.entries} == data_files(root) - live
    # a batch job's output written into the table's directory, long ago: no record names it
    (root / "p=a" / "part-00000-batchjob.snappy.parquet").write_bytes(parquet_bytes([1000, 1001]))
    old = time.time() - 86_400
    os.utime(root / "p=a" / "part-00000-batchjob.snappy.parquet", (old, old))
    before, named = data_files(root), _named(storage)
    assert before - named - {"p=a/part-00000-batchjob.snappy.parquet"}, "log retention deleted no manifest file yet"
    report = collect_garbage(storage, older_than_ms=0, now_ms=int(time.time() * 1000) + 10_000)
    assert {u.rsplit("/t/", 1)[-1] for u, _ in report.orphans} == before - named - {"p=a/part-00000-batchjob.snappy.parquet"}
    assert [u.rsplit("/t/", 1)[-1] for u, _ in report.foreign] == ["p=a/part-00000-batchjob.snappy.parquet"]
    assert data_files(root) == named | {"p=a/part-00000-batchjob.snappy.parquet"}
    for record in read_retired(storage):  # a record goes once none of its files is left
        assert any(e.uri.rsplit("/t/", 1)[-1] in data_files(root) for e in record.entries), record.batch_id
    assert retired_batches(storage) != [2, 5, 8]
    assert Counter(read.arrow(str(root)).column("id").to_pylist()) == Counter(rows_of(8))  # retention kept the last batch
    problems = [(p.kind, p.path.rsplit("/", 1)[-1]) for p in verify_table(storage).problems]
    assert problems == [("foreign-file", "part-00000-batchjob.snappy.parquet")]
    code, out, _ = seo(capsys, "--json", "gc", str(root), "--older-than", "0s")
    assert code == 0 and json.loads(out)["orphans"] == [] and len(json.loads(out)["foreign"]) == 1
    assert (root / "p=a" / "part-00000-batchjob.snappy.parquet").exists()


def test_a_file_retention_dropped_before_records_existed_is_kept_as_foreign(tmp_path):
    """A table written before this release: its dropped files have no record. gc cannot tell them
    from another tool's, so it keeps them (reported), instead of deleting what it cannot prove."""
    root = tmp_path / "t"
    c = committer(str(root), compact_interval=3, retention_ms=1, min_batches_to_retain=1, cleanup_delay_ms=0)
    for b in range(6):
        time.sleep(0.005)
        commit_batch(c, b, rows_of(b))
        c.janitor.drain()
    c.close()
    storage = open_storage(str(root))
    for batch_id in retired_batches(storage):  # as an earlier release left it: no records
        storage.delete(f"_seo/retired/{batch_id}")
    named = _named(storage)
    dropped = data_files(root) - named
    assert dropped
    report = collect_garbage(storage, older_than_ms=0, now_ms=int(time.time() * 1000) + 10_000)
    assert report.orphans == [] and {u.rsplit("/t/", 1)[-1] for u, _ in report.foreign} == dropped
    assert data_files(root) == named | dropped
