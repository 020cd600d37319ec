"""``seo recover`` (and ``--discard-wal``, ``--rebuild-logs``) after a crash, on the tables they
must work on: a Delta table whose manifest is private (``spark_manifest=False``: it lives in
``_seo/manifest``, not ``_spark_metadata``) and a dataset group with its own compact interval.

Each crash leaves what a killed writer leaves: a published batch, or a claimed one, whose
claim is still pending. The repair must complete it exactly as the writer's own restart would
- the batch's rows stay readable once, by manifest and Delta readers alike - and must never
delete a published batch's files or the records of earlier batches.
"""

from __future__ import annotations

from collections import Counter

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.commit.protocol.wal import CommitSequenceStore
from streaming_exactly_once.errors import ExactlyOnceError
from streaming_exactly_once.maintenance.repair import discard_wal, rebuild_logs, recover_table
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import InjectedFailure
from tests.delta.helpers import commit_batch, delta_committer
from tests.delta.readback import delta_ids

Q = "11111111-1111-1111-1111-111111111111"


def ids_of(batch: int) -> list[int]:
    return list(range(batch * 10, batch * 10 + 10))


def crashed_private_table(root, *, mode: str, crash: str, batches: int = 3):
    """A ``spark_manifest=False`` Delta table of ``batches`` batches whose next writer died at
    ``crash`` in batch ``batches`` (its process is gone: its lease is free)."""
    storage = open_storage(str(root))
    writer = delta_committer(storage, spark_manifest=False)
    for b in range(batches):
        commit_batch(writer, Q, b, ids_of(b), mode=mode)
    writer.close()
    dying = delta_committer(storage, spark_manifest=False, fail_at=crash)
    with pytest.raises(InjectedFailure):
        commit_batch(dying, Q, batches, ids_of(batches), mode=mode)
    dying.lease.release()
    return storage


def assert_every_batch_once(root, batches: int) -> None:
    want = Counter(i for b in range(batches) for i in ids_of(b))
    assert Counter(read.arrow(str(root), columns=["id"]).column("id").to_pylist()) == want, "manifest readers"
    assert delta_ids(root) == want, "Delta readers"
    problems = [p.to_json() for p in verify_table(open_storage(str(root))).problems]
    assert not problems, problems[:5]


@pytest.mark.parametrize("mode", ["direct", "rename"])
@pytest.mark.parametrize("crash", ["after-manifest", "after-delta"])
def test_seo_recover_completes_a_private_manifest_tables_published_batch(tmp_path, mode, crash):
    """Killed after its manifest step (its Delta commit pending) or after its Delta commit: the
    batch is published. `seo recover` must roll it forward, not judge it unpublished."""
    storage = crashed_private_table(tmp_path / "t", mode=mode, crash=crash)
    report = recover_table(storage)
    assert report.rolled_forward == [3] and not report.discarded and not report.removed_intents, report
    assert report.deleted_data_files == 0, report
    assert_every_batch_once(tmp_path / "t", 4)
    writer = delta_committer(open_storage(str(tmp_path / "t")), spark_manifest=False)
    writer.open()  # the next start finds nothing to repair
    assert writer.latest_batch_id == 3
    writer.close()


def test_seo_recover_of_a_private_manifest_tables_first_batch_writes_no_spark_metadata(tmp_path):
    """The claim of batch 0 is rolled forward through the table's own manifest: no
    ``_spark_metadata`` appears (vanilla Spark readers would then see batch 0 forever)."""
    storage = crashed_private_table(tmp_path / "t", mode="direct", crash="after-manifest", batches=0)
    recover_table(storage)
    assert not (tmp_path / "t" / "_spark_metadata").exists()
    assert_every_batch_once(tmp_path / "t", 1)


def test_seo_recover_through_the_cli_keeps_a_private_manifest_tables_records(tmp_path, capsys):
    from streaming_exactly_once.cli.main import main

    crashed_private_table(tmp_path / "t", mode="direct", crash="after-manifest")
    offsets = sorted(p.name for p in (tmp_path / "t" / "_seo" / "offsets").iterdir())
    code = 0
    try:
        main(["recover", str(tmp_path / "t"), "--json"])
    except SystemExit as exc:
        code = exc.code or 0
    assert code == 0, capsys.readouterr()
    assert sorted(p.name for p in (tmp_path / "t" / "_seo" / "offsets").iterdir()) == offsets + ["3"]
    assert_every_batch_once(tmp_path / "t", 4)


def test_discard_wal_refuses_a_private_manifest_tables_published_batch(tmp_path):
    """The claim's writer is another process, gone (``discard_wal`` refuses a live one's)."""
    from tests.commit.processes import QA, Writer

    root = tmp_path / "t"
    steps = [
        {"do": "open"},
        {"do": "commits", "query": QA, "count": 3, "mode": "direct"},
        {"do": "commits", "query": QA, "mode": "direct", "crash_at": "after-manifest"},
    ]
    crashed = Writer({"name": "W", "root": str(root), "delta": {}, "options": {"spark_manifest": False}, "steps": steps})
    assert crashed.wait(60) == -9, crashed.output()
    storage = open_storage(str(root))
    next((root / "p=a").glob("part-00000-*-3.*")).unlink()  # even with a file of it gone
    with pytest.raises(ExactlyOnceError, match="is published"):
        discard_wal(storage, 3)
    assert CommitSequenceStore(storage).get(3) is not None, "the published batch's claim was discarded"


def test_rebuild_logs_reads_a_private_manifest_tables_own_manifest(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    writer = delta_committer(storage, spark_manifest=False)
    for b in range(4):
        commit_batch(writer, Q, b, ids_of(b), mode="rename")
    writer.close()
    (tmp_path / "t" / "_seo" / "commits" / "3").unlink()  # a commit record lost (the case it exists for)
    report = rebuild_logs(storage)
    assert report.commits == [3], report
    recover_table(storage)
    assert_every_batch_once(tmp_path / "t", 4)


def test_seo_recover_completes_a_dataset_group_with_its_own_compact_interval(tmp_path):
    """A group created with compact_interval=5 whose writer died right after its WAL claim:
    `seo recover <root>` must complete the batch (its interval is the group's, not a default)."""
    from streaming_exactly_once.checkpoint.reader import InputFile
    from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile
    from streaming_exactly_once.commit.groups.group_committer import GroupCommitter, MemberBatch
    from streaming_exactly_once.testing.faults import with_faults

    storage = open_storage(str(tmp_path / "g"))

    def commit(group, b):
        attempt = group.begin(Q, b, mode="rename")
        staged = f"{attempt.staging_dir}/data/t0/p=a/part-{b:05d}.txt"
        group.storage.put_if_absent(staged, str(b).encode())
        info = group.storage.info(staged)
        member = MemberBatch(table="t0", files=[StagedFile(f"p=a/part-{b:05d}.txt", info.size, info.mtime_ms, staged)], rows=1, format="parquet")
        group.commit_group(attempt, [member], input_files=[InputFile(source=0, path=f"file:///in/{b}.csv", timestamp=1)])

    writer = GroupCommitter(storage, CommitterOptions(heartbeat=False, compact_interval=5))
    writer.open()
    for b in range(3):
        commit(writer, b)
    writer.close()
    dying = GroupCommitter(with_faults(storage, fail_at="after-wal"), CommitterOptions(heartbeat=False, compact_interval=5))
    dying.open()
    with pytest.raises(InjectedFailure):
        commit(dying, 3)
    dying.lease.release()
    report = recover_table(storage)
    assert report.rolled_forward == [3], report
    assert CommitSequenceStore(storage).pending() == []


def test_discard_wal_of_a_batch_with_no_claim_says_there_was_nothing_to_discard(tmp_path):
    storage = open_storage(str(tmp_path / "t"))
    writer = delta_committer(storage)
    for b in range(2):
        commit_batch(writer, Q, b, ids_of(b))
    writer.close()
    assert discard_wal(storage, 5).startswith("no WAL entry 5: nothing to discard")
    with pytest.raises(ExactlyOnceError, match="is published"):  # a published batch: refused, as before
        discard_wal(storage, 1)
    assert_every_batch_once(tmp_path / "t", 2)
