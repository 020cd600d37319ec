"""Compaction batches that rewrite small files of earlier batches: every reader, at every batch,
sees every row once; ``as_of`` an older batch reads the files it named; ``seo gc`` deletes the
replaced files only once no retained batch names them."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.commit.data_compaction import CompactionPolicy
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from tests.commit.helpers import make_committer
from tests.commit.power_cut_runs import seo
from tests.delta.helpers import commit_batch, delta_committer
from tests.delta.readback import delta_ids

Q = "c0c0c0c0-0000-0000-0000-000000000000"
#: every file of the tests' batches is small and old enough; four of them are worth a rewrite
POLICY = CompactionPolicy(target_size=1 << 20, min_files=4, min_age_ms=0, max_bytes=1 << 20)


def ids_of(batch: int) -> list[int]:
    return list(range(batch * 10, batch * 10 + 10))


def read_ids(root, *, as_of=None) -> Counter:
    return Counter(read.arrow(str(root), columns=["id"], as_of=as_of).column("id").to_pylist())


def live_names(root) -> list[str]:
    return [e.uri.rsplit("/", 1)[-1] for e in ManifestLog(open_storage(str(root))).files()]


@pytest.mark.parametrize("mode", ["rename", "direct"])
def test_every_reader_sees_every_row_once_at_every_batch(tmp_path, mode):
    root = tmp_path / "t"
    committer = make_committer(open_storage(str(root)), compact_interval=3, compaction=POLICY)
    for b in range(9):
        commit_batch(committer, Q, b, ids_of(b), mode=mode)
        assert read_ids(root) == Counter(i for x in range(b + 1) for i in ids_of(x)), f"after batch {b}"
        for older in range(b + 1):
            assert read_ids(root, as_of=older) == Counter(i for x in range(older + 1) for i in ids_of(x)), f"as of {older} after {b}"
        if b in (2, 5, 8):  # a compaction batch: the small files before it are one file now, its own two files apart
            names = live_names(root)
            assert len(names) == 3 and sum(n.startswith(f"part-compacted-{b}-") for n in names) == 1, (b, names)
    committer.close()
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


def test_gc_deletes_replaced_files_once_no_retained_batch_names_them(tmp_path):
    root = tmp_path / "t"
    storage = open_storage(str(root))
    committer = make_committer(storage, compact_interval=3, compaction=POLICY, min_batches_to_retain=1, cleanup_delay_ms=0)
    for b in range(3):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()  # gc runs while no writer does
    replaced = sorted(p.name for p in (root / "p=a").iterdir() if p.name.startswith("part-0"))
    code, out = seo("gc", "--older-than", "0s", str(root))
    assert code == 0, out
    # batches 0 and 1 are retained: as_of them still reads the replaced files
    assert all((root / "p=a" / n).exists() for n in replaced)
    assert read_ids(root, as_of=0) == Counter(ids_of(0))
    committer = make_committer(storage, compact_interval=3, compaction=POLICY, min_batches_to_retain=1, cleanup_delay_ms=0)
    for b in range(3, 9):
        commit_batch(committer, Q, b, ids_of(b))
        committer.janitor.drain()
    committer.close()
    code, out = seo("gc", "--older-than", "0s", str(root))
    assert code == 0, out
    gone = [n for n in replaced if not (root / "p=a" / n).exists()]
    assert gone, "gc kept every replaced file after retention dropped the batches that named them"
    assert read_ids(root) == Counter(i for x in range(9) for i in ids_of(x))
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


def test_a_delta_table_gets_one_commit_per_batch_with_the_rewrite_as_no_data_change(tmp_path):
    root = tmp_path / "t"
    committer = delta_committer(open_storage(str(root)), compact_interval=3, compaction=POLICY)
    for b in range(6):
        commit_batch(committer, Q, b, ids_of(b))
        assert delta_ids(root) == Counter(i for x in range(b + 1) for i in ids_of(x)), f"Delta after batch {b}"
        assert read_ids(root) == delta_ids(root)
    committer.close()
    for version in range(6):
        assert delta_ids(root, version=version) == Counter(i for x in range(version + 1) for i in ids_of(x))
    actions = [json.loads(line) for line in (root / "_delta_log" / f"{2:020d}.json").read_text().splitlines()]
    removes = [a["remove"] for a in actions if "remove" in a]
    adds = [a["add"] for a in actions if "add" in a]
    assert len(removes) == 4 and all(r["dataChange"] is False for r in removes)
    assert sorted(a["dataChange"] for a in adds) == [False, True, True]  # the rewrite, the batch's two files
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out
