"""Red-team cases of the Delta step (commit layer, no Spark): a crash between the Delta commit
and the WAL's next step with another writer's Delta commit before the recovery, another
writer's commit between our manifest step and our Delta commit, and damaged log files that
are not the newest commit (a checkpoint, ``_last_checkpoint``, a commit a checkpoint covers)."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pytest

from streaming_exactly_once.errors import DeltaTableError
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import InjectedFailure
from tests.delta.helpers import commit_batch, delta_committer
from tests.delta.readback import app_id_of, batch_commits, delta_commits, delta_ids

Q = "rrrrrrrr-0000-0000-0000-000000000000"


def ids_of(batch: int) -> list[int]:
    return list(range(batch * 100, batch * 100 + 4))


def foreign_append(table, ids) -> None:
    from deltalake import write_deltalake

    write_deltalake(str(table), pa.table({"id": pa.array(ids, pa.int64()), "p": ["z"] * len(ids)}), mode="append", partition_by=["p"])


def test_crash_after_the_delta_commit_then_a_foreign_commit_then_recovery_adds_nothing(tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    c = delta_committer(storage)
    commit_batch(c, Q, 0, ids_of(0))
    c.close()
    failing = delta_committer(storage, fail_at="after-delta")
    with pytest.raises(InjectedFailure):
        commit_batch(failing, Q, 1, ids_of(1))
    failing.close()
    foreign_append(table, [-1])  # another Delta writer: version 2, our txn still says batch 1
    c = delta_committer(storage)
    assert c.open().rolled_forward == [1]  # verify() finds txn >= 1: no second Delta commit
    commit_batch(c, Q, 2, ids_of(2))
    c.close()
    assert batch_commits(table) == {0: 0, 1: 1, 2: 3}
    assert delta_ids(table) == Counter(ids_of(0) + ids_of(1) + ids_of(2) + [-1])
    assert "delta-diverged" in [p.kind for p in verify_table(storage).problems]  # the foreign file


def test_a_foreign_commit_between_our_manifest_and_our_delta_commit(tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    c = delta_committer(storage)
    commit_batch(c, Q, 0, ids_of(0))
    c.close()
    failing = delta_committer(storage, fail_at="after-manifest")
    with pytest.raises(InjectedFailure):
        commit_batch(failing, Q, 1, ids_of(1))
    failing.close()
    foreign_append(table, [-1, -2])
    c = delta_committer(storage)
    assert c.open().rolled_forward == [1]  # our commit lands on the version after the foreign one
    c.close()
    assert batch_commits(table) == {0: 0, 1: 2}
    assert delta_ids(table) == Counter(ids_of(0) + ids_of(1) + [-1, -2])
    commits = delta_commits(table)
    assert [len(c.adds) for c in commits] == [2, 1, 2] and app_id_of(table) not in str(commits[1].txns)


def _table_with_checkpoint(tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    c = delta_committer(storage, checkpoint_interval=3)
    for b in range(5):
        commit_batch(c, Q, b, ids_of(b))
    c.close()
    # made in the writer's background work after version 2 made one due: of the newest version
    # then, which is 2, 3 or 4 depending on how far the next batches' commits got meanwhile
    assert sorted((table / "_delta_log").glob("*.checkpoint.parquet")), os.listdir(table / "_delta_log")
    return table, storage


def _checkpoint(table):
    return sorted((table / "_delta_log").glob("*.checkpoint.parquet"))[-1]


def test_a_damaged_commit_a_checkpoint_covers_is_not_read(tmp_path):
    table, storage = _table_with_checkpoint(tmp_path)
    (table / "_delta_log" / "00000000000000000001.json").write_text('{"add": garbage')
    c = delta_committer(storage, checkpoint_interval=3)
    commit_batch(c, Q, 5, ids_of(5))  # the log loads from checkpoint 2 on; the batch commits
    c.close()
    assert delta_ids(table) == Counter(i for b in range(6) for i in ids_of(b))


def test_a_damaged_checkpoint_is_a_named_error_and_nothing_is_committed(tmp_path):
    table, storage = _table_with_checkpoint(tmp_path)
    _checkpoint(table).write_bytes(b"PAR1 not parquet")
    before = sorted(os.listdir(table / "_delta_log"))
    with pytest.raises(DeltaTableError, match="does not load"):
        c = delta_committer(storage, checkpoint_interval=3)
        commit_batch(c, Q, 5, ids_of(5))
    assert sorted(os.listdir(table / "_delta_log")) == before
    assert "delta-unreadable" in [p.kind for p in verify_table(storage).problems]


def test_a_damaged_last_checkpoint_pointer_is_ignored_by_delta_rs(tmp_path):
    """delta-rs 1.6 lists the log when ``_last_checkpoint`` does not parse: the batch commits once."""
    table, storage = _table_with_checkpoint(tmp_path)
    (table / "_delta_log" / "_last_checkpoint").write_text("{not json")
    c = delta_committer(storage, checkpoint_interval=3)
    commit_batch(c, Q, 5, ids_of(5))
    c.close()
    assert delta_ids(table) == Counter(i for b in range(6) for i in ids_of(b))
    assert batch_commits(table)[5] == 5


# -- red team, round 2 (an independent helper; reproducers in /work/scratch/redteam-delta) -------


def _log(table, version: int):
    return table / "_delta_log" / f"{version:020d}.json"


def test_an_emptied_commit_file_stops_the_next_delta_commit_instead_of_hiding_the_loss(tmp_path):
    """F1: delta-rs reads an empty ``N.json`` (a power cut after its link, before its bytes) as a
    version without actions, so batch 1's files and txn vanish for Delta readers. Committing batch 2
    on top would make that permanent; the Delta step refuses a txn that is not ``M - 1``."""
    table = tmp_path / "t"
    storage = open_storage(str(table))
    c = delta_committer(storage)
    for b in range(2):
        commit_batch(c, Q, b, ids_of(b))
    c.close()
    failing = delta_committer(storage, fail_at="after-manifest")
    with pytest.raises(InjectedFailure):
        commit_batch(failing, Q, 2, ids_of(2))
    failing.close()
    _log(table, 1).write_bytes(b"")
    before = sorted(os.listdir(table / "_delta_log"))
    c = delta_committer(storage)
    with pytest.raises(DeltaTableError, match=r"batch 2: .* holds batches up to 0 .* 1 is the last one committed") as caught:
        c.open()  # the roll-forward of batch 2 is where the gap shows
    assert "restore the log" in str(caught.value).lower()
    c.close()
    assert sorted(os.listdir(table / "_delta_log")) == before  # nothing added on top of the gap
    assert storage.exists("_seo/wal/2")  # the batch stays pending, for after the restore


def test_a_delta_log_that_lost_its_newest_commits_is_refused_before_the_next_batch(tmp_path):
    table = tmp_path / "t"
    storage = open_storage(str(table))
    c = delta_committer(storage)
    for b in range(3):
        commit_batch(c, Q, b, ids_of(b))
    c.close()
    _log(table, 2).unlink()  # a restored older log: batch 2 is in the manifest only
    c = delta_committer(storage)
    with pytest.raises(DeltaTableError, match="holds batches up to 1"):
        commit_batch(c, Q, 3, ids_of(3))
    c.close()
    assert not _log(table, 2).exists() and delta_ids(table) == Counter(ids_of(0) + ids_of(1))


def test_our_txn_carries_last_updated(tmp_path):
    """F3: delta-spark keeps a txn only while ``lastUpdated`` is newer than
    delta.setTransactionRetentionDuration; a txn without it is dropped at once where that is set."""
    table = tmp_path / "t"
    storage = open_storage(str(table))
    c = delta_committer(storage)
    commit_batch(c, Q, 0, ids_of(0))
    c.close()
    import json
    import time

    txns = [json.loads(line)["txn"] for line in _log(table, 0).read_text().splitlines() if '"txn"' in line]
    assert len(txns) == 1 and txns[0]["version"] == 0
    assert abs(txns[0]["lastUpdated"] - time.time() * 1000) < 60_000


def test_the_delta_version_of_batch_zero_is_found_without_a_hint(tmp_path):
    """F5: txn 0 was read as 'no batch' when no commit record named the version."""
    from streaming_exactly_once.delta.target import DeltaTarget

    table = tmp_path / "t"
    storage = open_storage(str(table))
    c = delta_committer(storage)
    commit_batch(c, Q, 0, ids_of(0))
    target = DeltaTarget(storage, c.identity.delta_app_id)
    c.close()
    assert target.version_for_batch(0) == 0


def test_a_delta_log_path_that_is_a_file_is_refused_before_the_claim(tmp_path):
    table = tmp_path / "t"
    table.mkdir()
    (table / "_delta_log").write_text("not a directory")
    storage = open_storage(str(table))
    c = delta_committer(storage)
    with pytest.raises(DeltaTableError, match="is a file, not a directory"):
        commit_batch(c, Q, 0, ids_of(0))
    c.close()
    assert not storage.exists("_spark_metadata/0") and not storage.exists("_seo/wal/0")


def test_expired_log_cleanup_runs_at_checkpoints_only(tmp_path):
    """delta-rs runs its expired-log cleanup (a listing of all of _delta_log) after every commit;
    the Delta step turns that off and runs it where a checkpoint was just written."""
    import time

    from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
    from streaming_exactly_once.delta.target import DeltaSettings

    table = tmp_path / "t"
    storage = open_storage(str(table))
    options = CommitterOptions(heartbeat=False, partition_by=("p",), delta=DeltaSettings(checkpoint_interval=5, log_retention_ms=1000))
    c = TableCommitter(storage, options)
    for b in range(6):  # versions 0..5; delta-rs checkpoints version 4 (every 5th version: 4, 9, ...)
        commit_batch(c, Q, b, ids_of(b))
    time.sleep(1.5)  # versions 0..5 expire; checkpoint 4 covers 0..3
    commit_batch(c, Q, 6, ids_of(6))
    assert _log(table, 0).exists()  # no cleanup at version 6 (delta-rs's own hook would have run it)
    for b in range(7, 10):  # checkpoint at 9, then the cleanup
        commit_batch(c, Q, b, ids_of(b))
    c.close()
    assert not _log(table, 0).exists() and not _log(table, 3).exists()
    assert delta_ids(table) == Counter(i for b in range(10) for i in ids_of(b))
