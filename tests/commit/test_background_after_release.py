"""Background work queued before a writer let the table go (a SIGTERM release, a stopped
SparkContext) writes nothing afterwards - not even a compaction work file beside its successor."""

from __future__ import annotations

import os

import pytest

from streaming_exactly_once.checkpoint.reader import InputFile
from streaming_exactly_once.commit.background.compaction_preparation import preparation_of
from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile
from streaming_exactly_once.commit.groups.group_committer import GroupCommitter, MemberBatch
from tests.commit.helpers import make_committer, stage_and_commit

Q = "55555555-5555-5555-5555-555555555555"


def _work_files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs if f.endswith(".prep"))


def _group_commit(group, batch):
    group.ensure_open()
    attempt = group.begin(Q, batch, mode="rename")
    staged = f"{attempt.staging_dir}/data/t0/p=a/part-{batch:05d}.txt"
    group.storage.put_if_absent(staged, b"1")
    info = group.storage.info(staged)
    file = StagedFile(final=f"p=a/part-{batch:05d}.txt", size=info.size, mtime_ms=info.mtime_ms, staged=staged)
    group.commit_group(
        attempt,
        [MemberBatch(table="t0", files=[file], rows=1, format="parquet")],
        input_files=[InputFile(source=0, path=f"file:///in/{batch}.csv", timestamp=1)],
    )


@pytest.mark.parametrize("kind", ["table", "group"])
def test_a_released_writer_prepares_no_compaction(local_storage, kind):
    from streaming_exactly_once.storage import open_storage

    root = local_storage.root_uri.removeprefix("file://")
    options = {"heartbeat": False, "compact_interval": 5}

    def writer():
        if kind == "group":
            return GroupCommitter(open_storage(root), CommitterOptions(**options))
        return make_committer(open_storage(root), **options)

    first = writer()
    for batch in range(3):
        _group_commit(first, batch) if kind == "group" else stage_and_commit(first, Q, batch, [batch])
    first.janitor.drain()
    for log_ in first._all_logs():
        preparation_of(log_).discard()
    first.lease.release()  # let go without closing, as a SIGTERM release does
    successor = writer()
    successor.open()
    before = _work_files(root)
    first.housekeeping._if_held(first._prepare)  # the pass queued before the release runs now
    assert [p for p in _work_files(root) if p not in before and ".e1." in p] == []  # (e2: the successor's own)
    successor.close()
