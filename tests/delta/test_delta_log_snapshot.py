"""The Delta step's snapshot moves forward by reading the commits after it, not by listing
``_delta_log`` (``delta.log_snapshot``): its cost stays flat as the log grows, and it still sees
every commit another writer made in between."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from streaming_exactly_once.delta.log_snapshot import LogSnapshot
from streaming_exactly_once.delta.target import DeltaTarget
from streaming_exactly_once.errors import DeltaTableError
from streaming_exactly_once.storage import open_storage
from tests.delta.helpers import commit_batch, delta_committer
from tests.delta.readback import batch_commits, delta_commits, delta_ids

Q = "bbbbbbbb-0000-0000-0000-00000000000b"


def ids_of(batch: int) -> list[int]:
    return list(range(batch * 10, batch * 10 + 4))


def test_batches_never_read_the_log_through_delta_rs_after_the_first_and_checkpoints_are_made_in_the_background(tmp_path, monkeypatch):
    loads = []
    original = DeltaTarget.load

    def counted(self, *args, **kwargs):
        loads.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTarget, "load", counted)
    storage = open_storage(str(tmp_path / "t"))
    committer = delta_committer(storage, checkpoint_interval=10)
    for b in range(5):  # opening the table and creating it read the log through delta-rs
        commit_batch(committer, Q, b, ids_of(b))
    loads.clear()
    for b in range(5, 25):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    # a load lists _delta_log: never on a batch's path; the checkpoints are written in the
    # background (at versions 9 and 19, or a later one if the background ran behind)
    assert loads == []
    log = tmp_path / "t" / "_delta_log"
    checkpoints = sorted(int(p.name[:20]) for p in log.glob("*.checkpoint.parquet"))
    assert len(checkpoints) == 2 and 9 <= checkpoints[0] < 19 <= checkpoints[1], checkpoints
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == checkpoints[1]
    assert delta_ids(tmp_path / "t") == Counter(i for b in range(25) for i in ids_of(b))
    assert batch_commits(tmp_path / "t") == {b: b for b in range(25)}


def test_commits_another_writer_made_meanwhile_are_read_and_kept(tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    table = tmp_path / "t"
    committer = delta_committer(open_storage(str(table)))
    for b in range(2):
        commit_batch(committer, Q, b, ids_of(b))
    # another writer appends and adds a column while the committer holds its snapshot
    write_deltalake(str(table), pa.table({"id": pa.array([-7], pa.int64()), "p": ["z"]}), mode="append")
    DeltaTable(str(table)).alter.add_columns(__import__("deltalake").Field("note", "string", nullable=True))
    commit_batch(committer, Q, 2, ids_of(2))
    committer.close()
    assert delta_ids(table) == Counter([-7] + [i for b in range(3) for i in ids_of(b)])
    latest = DeltaTable(str(table))
    assert latest.version() == 4 and [f.name for f in latest.schema().fields] == ["id", "p", "note"]
    assert batch_commits(table)[2] == 4


def test_a_protocol_another_writer_raised_to_a_feature_appends_would_break_is_refused(tmp_path):
    table = tmp_path / "t"
    committer = delta_committer(open_storage(str(table)))
    commit_batch(committer, Q, 0, ids_of(0))
    upgrade = [
        {"commitInfo": {"timestamp": 1, "operation": "SET TBLPROPERTIES"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["appendOnly", "rowTracking"]}},
    ]
    (table / "_delta_log" / f"{1:020d}.json").write_text("\n".join(json.dumps(a) for a in upgrade) + "\n")
    with pytest.raises(DeltaTableError, match="writer features rowTracking"):
        commit_batch(committer, Q, 1, ids_of(1))
    committer.close()
    assert len(delta_commits(table)) == 2  # nothing was added on top of the upgrade
    assert delta_ids(table) == Counter(ids_of(0))


def test_a_snapshot_older_than_the_newest_checkpoint_is_read_again_from_the_log(tmp_path):
    """Log cleanup may have removed the commits right after an old snapshot (a checkpoint covers
    them): reading forward from it could take a missing commit for the end of the log."""
    table = tmp_path / "t"
    storage = open_storage(str(table))
    committer = delta_committer(storage, checkpoint_interval=3)
    commit_batch(committer, Q, 0, ids_of(0))
    committer.close()
    from deltalake import DeltaTable

    app = json.loads((table / "_seo" / "table").read_text().splitlines()[1])["delta"]["appId"]
    old = LogSnapshot.of_table(DeltaTable(str(table)), app)
    assert old.advanced(storage, app) == old  # nothing newer: the same snapshot
    committer = delta_committer(storage, checkpoint_interval=3)
    for b in range(1, 5):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    assert json.loads((table / "_delta_log" / "_last_checkpoint").read_text())["version"] > old.version
    assert old.advanced(storage, app) is None
    target = DeltaTarget(storage, app)
    assert target.applied_batch() == 4 and target.snapshot() is not None and target.snapshot().version == 4
