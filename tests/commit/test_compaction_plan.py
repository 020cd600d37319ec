"""What a compaction plans: ``min_age`` measured on the table's own clock (the newest live file's
timestamp, which a caught-up file-source reader's horizon follows, less the table's pauses), and a table copied or moved
to a new root compacted like the original."""

from __future__ import annotations

import io
import json
import math
import shutil
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming_exactly_once import read
from streaming_exactly_once.commit.rewrites.data_compaction import Candidate, CompactionPolicy, PlanNotes, plan, write
from streaming_exactly_once.manifest.entry import ManifestEntry
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from tests.commit.helpers import make_committer
from tests.commit.power_cut_runs import seo
from tests.commit.test_data_compaction import commit_files, live_names
from tests.delta.helpers import commit_batch

Q = "c0c0c0c0-0000-0000-0000-000000000001"
DAY_MS = 86_400_000


def _entries(storage, stamps: list[int]) -> list[ManifestEntry]:
    return [ManifestEntry.for_file(storage.uri(f"p=a/part-{n:05d}.snappy.parquet"), size=100, modification_time=ts) for n, ts in enumerate(stamps)]


def test_min_age_is_measured_from_the_newest_live_file_not_from_the_clock(tmp_path):
    """Files written 30 days ago, by the clock, when the table has had no file since: none is
    min_age (8 days) older than the newest file, so none is rewritten - a caught-up downstream
    query (maxFileAge 7 days) would read the new file as new."""
    storage = open_storage(str(tmp_path / "t"))
    now = 1_800_000_000_000
    t0 = now - 30 * DAY_MS
    policy = CompactionPolicy(target_size=1 << 20, min_files=3, min_age_ms=8 * DAY_MS, max_bytes=1 << 30)
    idle = _entries(storage, [t0, t0 + 1000, t0 + 2000, t0 + 3000])
    notes = PlanNotes()
    assert plan(storage, idle, policy, now_ms=now, notes=notes) == []
    assert (notes.small, notes.too_young, notes.newest_ms) == (4, 4, t0 + 3000)
    assert "before the table's newest file" in notes.why_nothing(policy)


def test_a_pause_is_added_to_min_age_until_it_is_min_age_old(tmp_path):
    """The table pauses 9 days after four files, then resumes. A query (maxFileAge 7 days) that
    read the four files and has not run since the first file after the pause has a horizon of
    the fourth file: a rewrite of the four, stamped as the fourth, is new to it (the explorer's
    finding: its rows read twice). So the floor is lowered by the pause while the pause is less
    than min_age before the newest file; once it is older, the four are rewritten."""
    storage = open_storage(str(tmp_path / "t"))
    now = 1_800_000_000_000
    t0 = now - 30 * DAY_MS
    policy = CompactionPolicy(target_size=1 << 20, min_files=3, min_age_ms=8 * DAY_MS, max_bytes=1 << 30)
    before = [t0, t0 + 1000, t0 + 2000, t0 + 3000]
    notes = PlanNotes()
    resumed = _entries(storage, [*before, t0 + 9 * DAY_MS])
    assert plan(storage, resumed, policy, now_ms=now, notes=notes) == []
    assert notes.gap_ms == 9 * DAY_MS - 3000 and notes.too_young == 5
    assert "longest pause in that time (777597s)" in notes.why_nothing(policy)
    later = _entries(storage, [*before, t0 + 9 * DAY_MS, t0 + 17 * DAY_MS])
    (candidate,) = plan(storage, later, policy, now_ms=now)
    assert [entry.modification_time for entry, _ in candidate.files] == before


def test_the_floor_is_min_age_and_the_longest_gap_below_the_newest_file(tmp_path):
    """A file a millisecond apart from the next: the floor is newest - min_age - 1 ms, exactly."""
    storage = open_storage(str(tmp_path / "t"))
    t0 = 1_700_000_000_000
    policy = CompactionPolicy(target_size=1 << 20, min_files=3, min_age_ms=10, max_bytes=1 << 30)
    for newest, rewritten in ((20, 10), (21, 11)):
        (candidate,) = plan(storage, _entries(storage, [t0 + n for n in range(newest + 1)]), policy, now_ms=t0)
        assert len(candidate.files) == rewritten
        assert max(entry.modification_time for entry, _ in candidate.files) == t0 + newest - 10 - 1


def test_seo_compact_rewrites_a_table_copied_to_a_new_root(tmp_path):
    """A table copied to a new directory keeps manifest entries under the root it was written at;
    ``seo compact`` on the copy rewrites them (it said "nothing to compact"), every reader of the
    copy sees every row once, and the original is left as it was."""
    original, copy = tmp_path / "t", tmp_path / "copied" / "t"
    committer = make_committer(open_storage(str(original)), compact_interval=3)
    for b in range(2):
        commit_batch(committer, Q, b, list(range(b * 10, b * 10 + 10)))
    committer.close()
    shutil.copytree(original, copy)
    before = sorted(p.name for p in original.rglob("*") if p.is_file())
    code, out = seo("--json", "compact", str(copy), "--min-age", "0s", "--min-files", "4", "--target-size", "1MB")
    report = json.loads(out)
    assert code == 0 and len(report["rewrites"]) == 1 and len(report["rewrites"][0]["files"]) == 4, out
    assert report["filesAfter"] == 1 and report["whyNothing"] is None, out
    live = ManifestLog(open_storage(str(copy))).files()
    assert [e.uri.startswith(f"file://{copy}/") for e in live] == [True], [e.uri for e in live]
    assert Counter(read.arrow(str(copy), columns=["id"]).column("id").to_pylist()) == Counter(range(20))
    code, out = seo("--json", "verify", str(copy))
    assert code == 0 and json.loads(out)["problems"] == [], out
    assert sorted(p.name for p in original.rglob("*") if p.is_file()) == before, "the original table was changed"
    assert Counter(read.arrow(str(original), columns=["id"]).column("id").to_pylist()) == Counter(range(20))


def _parquet(table, **options) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **options)
    return buf.getvalue()


def test_a_rewrite_replaces_exactly_the_files_it_merged(tmp_path):
    """Four files of one partition, one with another writer's rebase marker: the new file holds
    the other three, and only those three leave the listing (the fourth's rows are in no new
    file); the fourth is named to the caller, which leaves it out of its later plans."""
    storage = open_storage(str(tmp_path))
    files = []
    for n in range(4):
        table = pa.table({"id": pa.array([n], pa.int64())})
        if n == 2:
            table = table.replace_schema_metadata({"org.apache.spark.legacyDateTime": ""})
        rel = f"p=a/part-{n:05d}.snappy.parquet"
        data = _parquet(table)
        storage.put_if_absent(rel, data)
        files.append((ManifestEntry.for_file(storage.uri(rel), size=len(data), modification_time=1000 + n), rel))
    left: list[str] = []
    staged = write(
        storage,
        Candidate("p=a", tuple(files)),
        staging_dir="_seo/staging/9-rwtest-e1",
        batch_id=9,
        n=0,
        min_files=2,
        left_out=lambda entry, why: left.append(entry.path),
    )
    assert staged is not None
    merged = ["p=a/part-00000.snappy.parquet", "p=a/part-00001.snappy.parquet", "p=a/part-00003.snappy.parquet"]
    assert [rel for rel, _ in staged.rewrite.replaced] == merged
    assert staged.replaced_paths == [entry.path for entry, rel in files if rel in merged]
    assert pq.read_table(pa.BufferReader(storage.read_bytes(staged.staged))).column("id").to_pylist() == [0, 1, 3]
    assert left == [files[2][0].path]


def _live_ids(root) -> Counter:
    """Every row id of every live file, each file read on its own (their schemas differ)."""
    files = ManifestLog(open_storage(str(root))).files()
    return Counter(i for f in files for i in pq.read_table(f.uri.removeprefix("file://")).column("id").to_pylist())


@pytest.mark.parametrize("case", ["older-schema", "nan", "bounded"])
def test_a_file_that_cannot_be_merged_does_not_stall_its_partition(tmp_path, case):
    """One file per batch, compaction every third batch, at least four files per rewrite.
    older-schema: the partition's oldest file is from before a column was added; the others
    are merged without it, and its rows stay live. nan: a NaN (and a -0.0) in a double column
    read back as themselves. bounded: the target size fits four files, the oldest of another
    schema: that one is left out of the next plan, whose four files - the three beside it
    first - are merged."""
    root = tmp_path / "t"

    def table_of(b: int):
        ids = pa.array([b * 10, b * 10 + 1], pa.int64())
        if case == "nan":
            return pa.table({"id": ids, "v": pa.array([float("nan") if b == 0 else 0.5, -0.0], pa.float64())})
        return pa.table({"id": ids}) if b == 0 else pa.table({"id": ids, "added": pa.array(["x", "y"])})

    s0, s1 = (len(_parquet(table_of(b), compression="snappy")) for b in (0, 1))
    target = 4 * s1 + (s1 - s0) // 2 if case == "bounded" else 1 << 20
    policy = CompactionPolicy(target_size=target, min_files=4, min_age_ms=0, max_bytes=1 << 30)
    committer = make_committer(open_storage(str(root)), compact_interval=3, compaction=policy)
    for b in range(9):
        commit_files(committer, b, [table_of(b)], compression="snappy")
    committer.close()
    compacted = [n for n in live_names(root) if n.startswith("part-compacted-")]
    assert compacted, live_names(root)
    assert _live_ids(root) == Counter(i for b in range(9) for i in (b * 10, b * 10 + 1))
    if case != "nan":  # the odd file stays; the files beside it were merged (not only later ones)
        manifest = ManifestLog(open_storage(str(root)))
        live = {e.path for e in manifest.files()}
        first, beside = {e.path for e in manifest.files(as_of=0)}, {e.path for e in manifest.files(as_of=3)}
        assert first <= live and not (beside - first) & live, sorted(live)
    if case == "nan":
        values = {r["id"]: r["v"] for r in read.arrow(str(root)).to_pylist()}
        assert math.isnan(values[0]) and values[10] == 0.5 and math.copysign(1.0, values[1]) == -1.0, values


def test_a_claim_made_after_gc_aborted_its_staged_rewrite_is_discarded_by_the_next_start(tmp_path):
    """A writer prepared its compaction batch's rewrite, passed its last fence check and froze
    right before its claim. Its lease ran out, and ``seo gc`` took the table: the rewrite's
    staging directory was old enough to judge 'abort' and delete, the batch's own was not. The
    writer then woke and made its claim. The next start must discard that claim - rolling it
    forward can only fail on the deleted rewrite, and the table would open for nobody."""
    import os
    import time

    from streaming_exactly_once.errors import WriterFencedError
    from streaming_exactly_once.maintenance.gc import collect_garbage
    from streaming_exactly_once.testing.faults import FaultInjectingStorage, Rule, Where
    from tests.commit.test_data_compaction import POLICY, ids_of, read_ids

    root = tmp_path / "t"
    storage = FaultInjectingStorage(open_storage(str(root)))
    frozen = make_committer(storage, compact_interval=3, compaction=POLICY, timeout_ms=300)
    for b in range(2):
        commit_batch(frozen, Q, b, ids_of(b))
    frozen.janitor.drain()  # the rewrite of batches 0-1, staged for compaction batch 2
    (rewrite_dir,) = [d for d in (root / "_seo" / "staging").iterdir() if "-rw" in d.name]

    def gc_meanwhile() -> None:
        time.sleep(0.5)  # the frozen writer's lease runs out
        for f in rewrite_dir.rglob("*"):
            os.utime(f, (time.time() - 7200,) * 2)
        report = collect_garbage(open_storage(str(root)), older_than_ms=1_800_000)
        assert report.staging == [open_storage(str(root)).uri(f"_seo/staging/{rewrite_dir.name}")], report

    storage.arm([Rule(Where(("put_if_absent",), r"^_seo/wal/2$", "before"), "call", callback=gc_meanwhile)])
    with pytest.raises(WriterFencedError):
        commit_batch(frozen, Q, 2, ids_of(2))
    frozen.close()
    assert (root / "_seo" / "wal" / "2").exists() and not rewrite_dir.exists()
    successor = make_committer(open_storage(str(root)), compact_interval=3, compaction=POLICY)
    report = successor.open()
    assert report.discarded == [2], report
    commit_batch(successor, Q, 2, ids_of(2))  # the query replays its batch
    successor.close()
    assert read_ids(root) == Counter(i for b in range(3) for i in ids_of(b))
