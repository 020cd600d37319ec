"""Red-team cases of the Delta step (commit layer, no Spark): a crash between the Delta commit
and the WAL's next step with another writer's Delta commit before the recovery, another
writer's commit between our manifest step and our Delta commit, and damaged log files that
are not the newest commit (a checkpoint, ``_last_checkpoint``, a commit a checkpoint covers)."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pytest

from streaming_exactly_once.commit.faults import InjectedFailure
from streaming_exactly_once.errors import DeltaTableError
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
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
    assert (table / "_delta_log" / "00000000000000000002.checkpoint.parquet").exists()
    return table, storage


def test_a_damaged_commit_a_checkpoint_covers_is_not_read(tmp_path):
    table, storage = _table_with_checkpoint(tmp_path)
    (table / "_delta_log" / "00000000000000000001.json").write_text('{"add": garbage')
    c = delta_committer(storage, checkpoint_interval=3)
    commit_batch(c, Q, 5, ids_of(5))  # the log loads from checkpoint 2 on; the batch commits
    c.close()
    assert delta_ids(table) == Counter(i for b in range(6) for i in ids_of(b))


def test_a_damaged_checkpoint_is_a_named_error_and_nothing_is_committed(tmp_path):
    table, storage = _table_with_checkpoint(tmp_path)
    (table / "_delta_log" / "00000000000000000002.checkpoint.parquet").write_bytes(b"PAR1 not parquet")
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
