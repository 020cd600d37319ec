"""What a compaction plans: ``min_age`` measured on the table's own clock (the newest live file's
timestamp, which a caught-up file-source reader's horizon follows), and a table copied or moved
to a new root compacted like the original."""

from __future__ import annotations

import json
import shutil
from collections import Counter

from streaming_exactly_once import read
from streaming_exactly_once.commit.data_compaction import CompactionPolicy, PlanNotes, plan
from streaming_exactly_once.manifest.entry import ManifestEntry
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from tests.commit.helpers import make_committer
from tests.commit.power_cut_runs import seo
from tests.delta.helpers import commit_batch

Q = "c0c0c0c0-0000-0000-0000-000000000001"
DAY_MS = 86_400_000


def _entries(storage, stamps: list[int]) -> list[ManifestEntry]:
    return [ManifestEntry.for_file(storage.uri(f"p=a/part-{n:05d}.snappy.parquet"), size=100, modification_time=ts) for n, ts in enumerate(stamps)]


def test_min_age_is_measured_from_the_newest_live_file_not_from_the_clock(tmp_path):
    """Files written 30 days ago, by the clock, when the table has had no file since: none is
    min_age (8 days) older than the newest file, so none is rewritten - a caught-up downstream
    query (maxFileAge 7 days) would read the new file as new. Once a file 9 days newer arrives,
    the old ones are rewritten and the new one is not."""
    storage = open_storage(str(tmp_path / "t"))
    now = 1_800_000_000_000
    t0 = now - 30 * DAY_MS
    policy = CompactionPolicy(target_size=1 << 20, min_files=3, min_age_ms=8 * DAY_MS, max_bytes=1 << 30)
    idle = _entries(storage, [t0, t0 + 1000, t0 + 2000, t0 + 3000])
    notes = PlanNotes()
    assert plan(storage, idle, policy, now_ms=now, notes=notes) == []
    assert (notes.small, notes.too_young, notes.newest_ms) == (4, 4, t0 + 3000)
    assert "before the table's newest file" in notes.why_nothing(policy)
    newer = _entries(storage, [t0, t0 + 1000, t0 + 2000, t0 + 3000, t0 + 9 * DAY_MS])
    (candidate,) = plan(storage, newer, policy, now_ms=now)
    assert [entry.modification_time for entry, _ in candidate.files] == [t0, t0 + 1000, t0 + 2000, t0 + 3000]
    # a file exactly min_age below the newest is old enough; one a millisecond younger is not
    exact = _entries(storage, [t0, t0 + 1, t0 + 2, t0 + 2 + 8 * DAY_MS])
    assert [len(c.files) for c in plan(storage, exact, policy, now_ms=now)] == [3]
    short = _entries(storage, [t0, t0 + 1, t0 + 2, t0 + 1 + 8 * DAY_MS])
    assert plan(storage, short, policy, now_ms=now) == []


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
