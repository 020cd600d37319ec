"""``seo recover --discard-wal`` racing the writers it cannot see: a writer on another host that
publishes the claim while the command runs, and a writer that takes the table over from a
frozen command and re-runs the batch under the same number. The command deletes only what is
provably the discarded claim's: never a published batch's files, never another attempt's
offsets record (a table whose offsets log lost a published batch's record does not open)."""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.commit.protocol.wal import CommitSequenceStore
from streaming_exactly_once.errors import ExactlyOnceError
from streaming_exactly_once.maintenance import repair
from streaming_exactly_once.maintenance.repair import _logs, discard_wal
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.attempt_key import AttemptKey
from streaming_exactly_once.table.offsets_log import OffsetsRecord
from streaming_exactly_once.testing.faults import FaultInjectingStorage, Rule, Where
from tests.commit.helpers import make_committer
from tests.commit.processes import QA, Writer
from tests.delta.helpers import commit_batch


def _crashed_claim(root):
    """Batch 0 published, batch 1 claimed by a writer process killed right after its claim, and
    one of batch 1's staged files deleted outside the protocol (what ``--discard-wal`` is for)."""
    writer = Writer(
        {
            "name": "W",
            "root": str(root),
            "steps": [{"do": "open"}, {"do": "commits", "query": QA}, {"do": "commits", "query": QA, "crash_at": "after-wal"}],
        }
    )
    assert writer.wait(60) == -9, writer.output()
    storage = open_storage(str(root))
    claim = CommitSequenceStore(storage).get(1)
    staged = sorted(root.glob(f"_seo/staging/*{claim.attempt}*/data/p=a/part-*"))
    staged[0].unlink()
    return storage, claim, staged[1:]


def test_discard_wal_stops_when_a_writer_it_cannot_see_publishes_the_batch_meanwhile(tmp_path):
    """A writer on another host, frozen past its last fence check, publishes the claim's manifest
    file while the command runs (after its verdict and fence check): the command looks once more
    before it deletes, refuses, and deletes nothing."""
    storage, claim, kept = _crashed_claim(tmp_path / "t")
    manifest_file = _logs(storage).require_manifest().path(1)

    def the_other_host_publishes() -> None:
        storage.put_if_absent(manifest_file, b"v1\n")

    faulty = FaultInjectingStorage(storage)
    faulty.arm([Rule(Where(("put_if_absent",), r"^_seo/verdicts/", "after"), "call", callback=the_other_host_publishes)])
    with pytest.raises(ExactlyOnceError, match="completed by another writer"):
        discard_wal(faulty, 1)
    assert all(f.exists() for f in kept), "the data of a batch published while the command ran was deleted"
    assert CommitSequenceStore(storage).get(1) is not None


@pytest.mark.parametrize("frozen", ["after-the-claim-went", "after-reading-its-intent"])
def test_discard_wal_frozen_past_its_lease_leaves_the_batch_a_newer_writer_reran(tmp_path, monkeypatch, frozen):
    """The command freezes past its lease - once the claim is deleted, or once it has read an
    offsets record of batch 1 that the claim's attempt wrote (an older release's intent). A
    writer takes the table over, forgets that record, re-runs batch 1 under the number (its own
    offsets record) and publishes it. The command wakes: the offsets record of batch 1 is the
    newer writer's now, and stays (the command checks that it still holds the table)."""
    root = tmp_path / "t"
    storage, claim, _ = _crashed_claim(root)
    offsets = _logs(storage).require_offsets()
    if frozen == "after-reading-its-intent":
        monkeypatch.setattr(repair, "writer_still_running", lambda storage, epoch: None)
        offsets.add(1, [OffsetsRecord.of(claim.key, written_ms=1)])
    taken: list[bool] = []

    def a_writer_takes_over() -> None:
        successor = make_committer(open_storage(str(root)))
        successor.lease.clock = lambda: time.time() + 3600  # the command's lease has run out
        commit_batch(successor, QA, 1, list(range(5, 10)))  # what Spark replays
        successor.close()
        taken.append(True)

    where = Where(("delete",), r"^_seo/wal/1$", "after")
    if frozen == "after-reading-its-intent":
        where = Where(("read_bytes",), "^" + re.escape(offsets.path(1)) + "$", "after")
    faulty = FaultInjectingStorage(storage)
    faulty.arm([Rule(where, "call", callback=a_writer_takes_over)])
    discard_wal(faulty, 1)
    assert taken, "the takeover never ran"
    record = _logs(storage).require_offsets().record(1)
    assert record is not None and record.attempt != claim.attempt, "the newer writer's offsets record of batch 1 was deleted"
    reopened = make_committer(open_storage(str(root)))
    reopened.open()  # a gap in the offsets log would refuse this
    reopened.close()
    assert Counter(read.arrow(str(root), columns=["id"]).column("id").to_pylist()) == Counter(range(10))


def test_discard_wal_deletes_only_its_own_claims_offsets_record(tmp_path, monkeypatch):
    """An offsets record of batch 1 written by another attempt than the discarded claim's (an
    older release wrote one before staging, as an intent) is not the claim's to delete."""
    storage, claim, _ = _crashed_claim(tmp_path / "t")
    monkeypatch.setattr(repair, "writer_still_running", lambda storage, epoch: None)
    other = OffsetsRecord.of(AttemptKey(1, QA, 1, 1, "other001", "rename"), written_ms=1)
    _logs(storage).require_offsets().add(1, [other])
    assert discard_wal(storage, 1) == "discarded WAL entry 1"
    kept = _logs(storage).require_offsets().record(1)
    assert kept is not None and kept.attempt == "other001", "the offsets record of another attempt was deleted"
    assert Counter(read.arrow(str(tmp_path / "t"), columns=["id"]).column("id").to_pylist()) == Counter(range(5))
