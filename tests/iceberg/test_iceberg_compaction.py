"""Compaction on an Iceberg table: a compaction batch commits its append and then a ``replace``
snapshot of its rewrites, in one metadata version. pyiceberg reads every row once at every
batch's snapshot; the manifest's readers agree; snapshot expiry and the cleanup of interrupted
commits keep what the retained snapshots read."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.commit.rewrites.data_compaction import CompactionPolicy
from streaming_exactly_once.iceberg.history import batch_of
from streaming_exactly_once.storage import open_storage
from tests.commit.power_cut_runs import seo
from tests.delta.helpers import commit_batch as commit_only
from tests.iceberg.table_helpers import current_metadata, iceberg_committer, pyiceberg_ids

Q = "1ce0c0c0-0000-0000-0000-000000000000"
POLICY = CompactionPolicy(target_size=1 << 20, min_files=4, min_age_ms=0, max_bytes=1 << 20)


def ids_of(batch: int) -> list[int]:
    return list(range(batch * 10, batch * 10 + 10))


def upto(batch: int) -> Counter:
    return Counter(i for b in range(batch + 1) for i in ids_of(b))


def commit_batch(committer, b: int):
    result = commit_only(committer, Q, b, ids_of(b))
    committer.janitor.drain()  # the rewrite is ready by the next batch (a trigger interval)
    return result


def snapshots(root) -> list[dict]:
    return current_metadata(root)["snapshots"]


@pytest.mark.parametrize("delta", [False, True], ids=["iceberg", "delta+iceberg"])
def test_a_compaction_batch_is_an_append_then_a_replace_snapshot_and_every_snapshot_reads_each_row_once(tmp_path, delta):
    root = tmp_path / "t"
    committer = iceberg_committer(open_storage(str(root)), delta=delta, compact_interval=3, compaction=POLICY)
    for b in range(9):
        commit_batch(committer, b)
        assert pyiceberg_ids(root) == upto(b), f"pyiceberg after batch {b}"
        assert Counter(read.arrow(str(root), columns=["id"]).column("id").to_pylist()) == upto(b), f"manifest after batch {b}"
    committer.close()
    by_batch: dict[int, list[dict]] = {}
    for snap in snapshots(root):
        by_batch.setdefault(int(snap["summary"]["seo.batch-id"]), []).append(snap)
    for b, snaps in by_batch.items():
        operations = [s["summary"]["operation"] for s in snaps]
        if b in (2, 5, 8):  # the batch's files, then its rewrite of the four small files before it
            assert operations == ["append", "replace"], (b, operations)
            replace = snaps[1]["summary"]
            assert int(replace["deleted-data-files"]) >= 4 and replace["added-data-files"] == "1", replace
            assert replace["deleted-records"] == replace["added-records"], replace
            assert replace["total-records"] == snaps[0]["summary"]["total-records"] == str(sum(upto(b).values())), replace
        else:
            assert operations == ["append"], (b, operations)
        for snap in snaps:  # every snapshot of the batch: its rows, each once
            assert pyiceberg_ids(root, snapshot_id=snap["snapshot-id"]) == upto(b), (b, snap["summary"]["operation"])
    for b in range(9):  # as_of a batch: its newest snapshot
        assert Counter(read.arrow(str(root), columns=["id"], as_of=b).column("id").to_pylist()) == upto(b)
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


def test_expiry_and_the_cleanup_of_interrupted_commits_keep_what_a_replace_snapshot_reads(tmp_path):
    """With one snapshot kept, a compaction batch's append expires at the next commit while its
    replace snapshot - which carries the append's manifests on - stays: the writer's cleanup at
    each start (``discard_leftovers``) and ``seo gc`` must not delete those manifests."""
    root = tmp_path / "t"
    storage = open_storage(str(root))
    seen = []
    for b in range(9):  # a start before every batch: the one after compaction batch M+1 finds M's replace alone
        committer = iceberg_committer(storage, keep=1, compact_interval=3, compaction=POLICY, cleanup_delay_ms=0, min_batches_to_retain=1)
        committer.ensure_open()  # the cleanup of earlier commits' leftovers runs here
        if b:
            assert pyiceberg_ids(root) == upto(b - 1), f"pyiceberg after the start before batch {b}"
        committer.janitor.drain()  # the rewrite planned at the start is ready (a trigger interval)
        commit_batch(committer, b)
        committer.close()
        seen.append([s["summary"]["operation"] for s in snapshots(root)])
        code, out = seo("gc", "--older-than", "0s", str(root))
        assert code == 0, out
        assert pyiceberg_ids(root) == upto(b), f"pyiceberg after gc at batch {b}"
    assert ["replace", "append"] in seen, seen  # a replace snapshot whose append had expired
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


def test_batch_of_reads_both_snapshots_of_a_compaction_batch(tmp_path):
    root = tmp_path / "t"
    committer = iceberg_committer(open_storage(str(root)), compact_interval=3, compaction=POLICY)
    for b in range(3):
        commit_batch(committer, b)
    app = committer.iceberg.app_id
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(str(root))
    committer.close()
    assert [batch_of(s, app) for s in table.metadata.snapshots] == [0, 1, 2, 2]


def test_a_rewrite_of_a_file_another_writer_removed_from_the_iceberg_table_is_left_out_of_it(tmp_path):
    """Another writer of the Iceberg table removed one of the small files a prepared rewrite
    replaces: the compaction batch commits without that rewrite in Iceberg (it can never delete
    a file the table no longer holds) instead of failing at every retry and restart; the
    manifest's readers still read every row once."""
    from tests.iceberg.helpers import target

    root = tmp_path / "t"
    storage = open_storage(str(root))
    committer = iceberg_committer(storage, compact_interval=3, compaction=POLICY)
    for b in range(2):
        commit_batch(committer, b)
    table = target(storage).load()
    victim = sorted((task.file for task in table.scan().plan_files()), key=lambda f: f.file_path)[0]
    with table.transaction() as txn, txn.update_snapshot().overwrite() as overwrite:
        overwrite.delete_data_file(victim)  # the other writer
    commit_batch(committer, 2)  # compaction batch 2: its rewrite replaces the victim too
    commit_batch(committer, 3)
    committer.close()
    assert Counter(read.arrow(str(root), columns=["id"]).column("id").to_pylist()) == upto(3)
    removed = Counter(pq_ids(victim.file_path))
    assert pyiceberg_ids(root) == upto(3) - removed, "the Iceberg table lost or repeated rows beyond the other writer's removal"
    assert [s["summary"]["operation"] for s in snapshots(root) if s["summary"].get("seo.batch-id") == "2"] == ["append"]


def pq_ids(uri: str) -> list[int]:
    import pyarrow.parquet as pq

    return pq.read_table(uri.removeprefix("file://"), columns=["id"]).column("id").to_pylist()
