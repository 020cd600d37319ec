"""Compaction in a dataset group: each table compacts on its own (its own compaction batches, in
whichever group batch gives it one), under the group's lease, staged under the group's root, and
every reader of every table sees every row once at every batch."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.checkpoint.reader import InputFile
from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile
from streaming_exactly_once.commit.groups.group_committer import GroupCommitter, MemberBatch
from streaming_exactly_once.commit.rewrites.data_compaction import CompactionPolicy
from streaming_exactly_once.delta.target import DeltaSettings
from streaming_exactly_once.errors import ConfigError, WriterFencedError
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.table_logs import TableLogs
from tests.commit.power_cut_runs import seo
from tests.delta.helpers import SCHEMA, parquet
from tests.delta.readback import delta_ids

Q = "9c9c9c9c-0000-0000-0000-000000000000"
POLICY = CompactionPolicy(target_size=1 << 20, min_files=4, min_age_ms=0, max_bytes=1 << 20)
#: t0 gets a batch in every group batch; t1 (a Delta table) in every other one
TABLES = {"t0": "parquet", "t1": "delta"}


def group(root, **opts) -> GroupCommitter:
    options = {"heartbeat": False, "compact_interval": 3, "compaction": POLICY, "delta": DeltaSettings(), **opts}
    return GroupCommitter(open_storage(str(root)), CommitterOptions(**options))


def ids_of(table: str, g: int) -> list[int]:
    base = 0 if table == "t0" else 100_000
    return list(range(base + g * 10, base + g * 10 + 10))


def tables_of(g: int) -> list[str]:
    return ["t0", "t1"] if g % 2 == 0 else ["t0"]


def commit(committer: GroupCommitter, g: int, *, drain: bool = True):
    """Group batch ``g``: two files per table it names, staged as the sink stages them."""
    committer.ensure_open()
    attempt = committer.begin(Q, g, mode="rename")
    members = []
    for table in tables_of(g):
        files = []
        ids = ids_of(table, g)
        for part, chunk in enumerate((ids[:5], ids[5:])):
            final = f"p=a/part-{part:05d}-{attempt.attempt}.c000.snappy.parquet"
            staged = f"{attempt.staging_dir}/data/{table}/{final}"
            committer.storage.put_if_absent(staged, parquet(chunk))
            info = committer.storage.info(staged)
            files.append(StagedFile(final=final, size=info.size, mtime_ms=info.mtime_ms, staged=staged))
        fmt = TABLES[table]
        members.append(
            MemberBatch(table=table, files=files, rows=len(ids), format=fmt, partition_by=("p",), schema=SCHEMA if fmt == "delta" else None)
        )
    result = committer.commit_group(attempt, members, input_files=[InputFile(source=0, path=f"file:///in/{g}.csv", timestamp=1)])
    if drain:
        committer.janitor.drain()  # the rewrite is prepared by the time the next batch comes (a trigger interval)
    return result


def expected(table: str, upto_group: int) -> Counter:
    return Counter(i for g in range(upto_group + 1) if table in tables_of(g) for i in ids_of(table, g))


def read_ids(root, table: str, *, as_of=None) -> Counter:
    return Counter(read.arrow(str(root / table), columns=["id"], as_of=as_of).column("id").to_pylist())


def live_names(root, table: str) -> list[str]:
    return [e.uri.rsplit("/", 1)[-1] for e in ManifestLog(open_storage(str(root / table))).files()]


def staging_dirs(root) -> list[str]:
    where = root / "_seo" / "staging"
    return sorted(p.name for p in where.iterdir()) if where.exists() else []


def test_each_table_compacts_on_its_own_and_every_reader_sees_every_row_once(tmp_path):
    root = tmp_path / "g"
    committer = group(root)
    table_batches = {"t0": [], "t1": []}  # per table: the group batch of each of its batches
    for g in range(18):
        commit(committer, g)
        for table in tables_of(g):
            table_batches[table].append(g)
        for table in TABLES:
            assert read_ids(root, table) == expected(table, g), f"{table} after group batch {g}"
            for m, at in enumerate(table_batches[table]):
                assert read_ids(root, table, as_of=m) == expected(table, at), f"{table} as of its batch {m}, after group batch {g}"
        assert delta_ids(root / "t1") == expected("t1", g)
        for table in tables_of(g):
            m = len(table_batches[table]) - 1
            if m % 3 == 2:  # the table's own compaction batch: the small files before it are one file now
                names = live_names(root, table)
                assert sum(n.startswith(f"part-compacted-{m}-") for n in names) == 1, (table, m, names)
                assert len(names) == 3, (table, m, names)
    committer.close()
    for version, at in enumerate(table_batches["t1"]):
        assert delta_ids(root / "t1", version=version) == expected("t1", at)
    actions = [json.loads(line) for line in (root / "t1" / "_delta_log" / f"{2:020d}.json").read_text().splitlines()]
    assert sum("remove" in a for a in actions) == 4 and all(a["remove"]["dataChange"] is False for a in actions if "remove" in a)
    assert staging_dirs(root) == [], "a published rewrite's staging directory was left"
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out
    for table in TABLES:
        code, out = seo("--json", "verify", str(root / table))
        assert code == 0 and json.loads(out)["problems"] == [], out
    # the tables' commit records name their rewrites (what verify checks)
    commits = TableLogs.open(open_storage(str(root / "t0")), kind="member").commits
    assert all(commits.record(m).rewrites for m in (2, 5, 8)), "a compaction batch's record does not name its rewrites"


def test_a_rewrite_is_staged_under_the_groups_root_and_a_takeover_aborts_a_frozen_writers(tmp_path):
    root = tmp_path / "g"
    zombie = group(root, lease_timeout_ms=50)
    for g in range(4):  # t0 at its batch 3; t1 at its batch 1: t1's next one is a compaction batch
        commit(zombie, g)
    prepared = staging_dirs(root)
    assert len(prepared) == 1 and "-rw" in prepared[0], prepared
    assert list((root / "_seo" / "staging" / prepared[0] / "rewrite").rglob("part-compacted-2-*")), "t1's rewrite (for its batch 2)"
    time.sleep(0.1)  # the zombie's lease runs out; a successor takes over and recovers
    successor = group(root)
    successor.ensure_open()
    assert prepared[0] not in staging_dirs(root), "a takeover left a frozen writer's rewrite for it to publish"
    with pytest.raises(WriterFencedError):
        commit(zombie, 4)
    for g in range(4, 9):
        commit(successor, g)
    successor.close()
    for table in TABLES:
        assert read_ids(root, table) == expected(table, 8)
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


def test_quarantine_and_other_formats(tmp_path):
    """A quarantine table is never compacted (nothing plans for it); an output of another format
    than Parquet's is refused before anything is written, naming the output."""
    committer = group(tmp_path / "g")
    assert committer.rewrites.get("_quarantine/rows/t0") is None
    assert committer.rewrites.get("t0") is not None
    from streaming_exactly_once.sink.dataset_sink import DatasetSink
    from streaming_exactly_once.sink.outputs import Output

    with pytest.raises(ConfigError, match="'events'"):
        DatasetSink(str(tmp_path / "s"), outputs=[Output("raw", format="iceberg"), Output("events", format="json")], compaction=True)
    assert not (tmp_path / "s").exists()


def test_a_claim_that_publishes_rewrites_is_a_v7_entry_and_reads_back(tmp_path, monkeypatch):
    """A release without compaction would ignore ``replaced`` and publish the replaced files
    beside the new one: such a claim is written as ``v7``, which that release refuses."""
    from streaming_exactly_once.commit.protocol.sequence import CommitSequence

    written: list[bytes] = []
    real = CommitSequence.to_bytes
    monkeypatch.setattr(CommitSequence, "to_bytes", lambda self: written.append(real(self)) or written[-1])
    committer = group(tmp_path / "g")
    for g in range(3):  # group batch 2 is t0's compaction batch 2 (t1's batch 1)
        commit(committer, g)
    committer.close()
    assert [w.split(b"\n", 1)[0] == b"v7" for w in written] == [False, False, True], [w[:3] for w in written]
    seq = CommitSequence.from_bytes(written[2], path="_seo/wal/2", batch_id=2)
    members = {m.table: m for s in seq.steps if s.kind == "members" for m in s.members}
    assert len(members["t0"].replaced) == 4 and members["t1"].replaced == ()


def test_a_close_right_after_a_start_leaves_no_staged_rewrite(tmp_path):
    """The start plan creates each table's rewrites on the rewrite lane: a close that comes
    before it has run (or while it runs) must stop those too, and leave nothing staged."""
    root = tmp_path / "g"
    committer = group(root)
    for g in range(3):  # t0's next batch (3) follows its compaction batch 2: its files are worth a rewrite at 5
        commit(committer, g)
    committer.close()
    for _ in range(3):
        committer = group(root)
        committer.ensure_open()
        committer.close()
        assert staging_dirs(root) == [], staging_dirs(root)
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


def test_a_groups_commit_time_leaves_out_its_tables_background_rewrites():
    from streaming_exactly_once.commit.protocol.sequence import commit_ms

    assert commit_ms({"manifest": 2.0, "rewrite:t0": 500.0, "rewrite": 300.0, "compaction:t0": 0.5}) == 2.5
