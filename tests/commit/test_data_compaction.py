"""Compaction batches that rewrite small files of earlier batches: every reader, at every batch,
sees every row once; ``as_of`` an older batch reads the files it named; ``seo gc`` deletes the
replaced files only once no retained batch names them."""

from __future__ import annotations

import datetime
import io
import json
import time
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming_exactly_once import read
from streaming_exactly_once.commit.rewrites.data_compaction import CompactionPolicy
from streaming_exactly_once.errors import WriterFencedError
from streaming_exactly_once.maintenance.verify import verify_table
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import FaultInjectingStorage, Rule, Where, rules
from tests.commit.consumer_checkpoint import consumer_checkpoint
from tests.commit.helpers import make_committer, stage_file
from tests.commit.power_cut_runs import seo
from tests.delta.helpers import commit_batch as commit_only, delta_committer
from tests.delta.readback import delta_ids

Q = "c0c0c0c0-0000-0000-0000-000000000000"
#: every file of the tests' batches is small and old enough; four of them are worth a rewrite
POLICY = CompactionPolicy(target_size=1 << 20, min_files=4, min_age_ms=0, max_bytes=1 << 20)


def commit_batch(committer, *args, **kwargs):
    """One batch, then the background work it queued (the next compaction batch's rewrite is
    prepared by the time it commits: what a stream's trigger interval gives)."""
    result = commit_only(committer, *args, **kwargs)
    committer.janitor.drain()
    return result


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


def test_gc_keeps_the_files_only_a_delta_remove_names_so_delta_time_travel_reads_every_version(tmp_path):
    """A Delta table's compaction batch removes the files it merged (``dataChange`` false). Once
    the manifest's retention no longer names them, Delta's log still does: a Delta reader
    time-travels to the versions before the remove. gc leaves them to Delta's own VACUUM."""
    root = tmp_path / "t"
    options = {"compact_interval": 3, "compaction": POLICY, "min_batches_to_retain": 1, "cleanup_delay_ms": 0}
    committer = delta_committer(open_storage(str(root)), **options)
    for b in range(9):
        commit_batch(committer, Q, b, ids_of(b))
        committer.janitor.drain()
    committer.close()
    removed = {
        json.loads(line)["remove"]["path"]
        for v in range(9)
        for line in (root / "_delta_log" / f"{v:020d}.json").read_text().splitlines()
        if "remove" in json.loads(line)
    }
    manifest = {e.uri.rsplit("/", 2)[-2] + "/" + e.uri.rsplit("/", 1)[-1] for e in ManifestLog(open_storage(str(root))).files()}
    assert removed and not removed & manifest  # only Delta's log still names them
    code, out = seo("gc", "--older-than", "0s", str(root))
    assert code == 0, out
    assert all((root / path).exists() for path in removed), "gc deleted files a Delta version before their remove reads"
    for version in range(9):
        assert delta_ids(root, version=version) == Counter(i for x in range(version + 1) for i in ids_of(x)), version
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


def test_a_rewrite_batchs_reader_index_is_built_from_its_own_entries(tmp_path):
    """The compact file of a rewrite batch is no concatenation of the previous one and the
    deltas: its reader index must not be extended from them by byte counts (random ids give
    lines of one length, which made such an extension land on a line boundary), or readers see
    replaced files twice and miss the batch's own, and gc deletes live files."""
    import random

    root = tmp_path / "t"
    storage = open_storage(str(root))
    policy = CompactionPolicy(target_size=3000, min_files=2, min_age_ms=0, max_bytes=3000)
    committer = make_committer(storage, compact_interval=3, compaction=policy)
    expected: Counter = Counter()
    for b in range(9):
        ids = [b * 10**12 + random.Random(b).randrange(10**11) + i for i in range(200)]
        commit_batch(committer, Q, b, ids)
        expected.update(ids)
        committer.janitor.drain()  # the reader index of each compact file is built
        assert read_ids(root) == expected, f"after batch {b}"
    committer.close()
    for compact_id in (2, 5, 8):
        index = sorted(pq.read_table(root / "_seo" / "manifest-index" / f"{compact_id}.parquet").column("path").to_pylist())
        assert index == sorted(e.path for e in ManifestLog(storage).all_records(as_of=compact_id)), compact_id
    code, out = seo("gc", "--older-than", "0s", str(root))
    assert code == 0, out
    assert read_ids(root) == expected
    assert Counter(r for f in ManifestLog(storage).files() for r in pq.read_table(f.uri.removeprefix("file://")).column("id").to_pylist()) == expected


def test_int96_timestamps_beyond_the_nanosecond_range_survive_the_rewrite(tmp_path):
    """Spark writes TIMESTAMP as INT96 by default; a far-future sentinel (9999-12-31) read as
    nanoseconds would wrap around into the 19th century."""
    root = tmp_path / "t"
    storage = open_storage(str(root))
    committer = make_committer(storage, compact_interval=3, compaction=POLICY)
    far = [datetime.datetime(9999, 12, 31), datetime.datetime(1500, 1, 1), datetime.datetime(2024, 1, 1)]
    for b in range(3):
        table = pa.table({"id": pa.array([b * 3 + i for i in range(3)], pa.int64()), "ts": pa.array(far, pa.timestamp("us"))})
        commit_files(committer, b, [table, table.slice(0, 0)], schema=TS_SCHEMA, use_deprecated_int96_timestamps=True)
    committer.close()
    names = live_names(root)
    assert any(n.startswith("part-compacted-2-") for n in names), names
    rows = read.arrow(str(root)).to_pylist()
    assert sorted((r["id"], r["ts"].replace(tzinfo=None)) for r in rows) == sorted((b * 3 + i, far[i]) for b in range(3) for i in range(3))


def test_files_written_with_other_parquet_metadata_are_not_merged(tmp_path):
    """Spark's per-file rebase markers live in the key-value metadata: a merged file keeps one
    file's, so files whose metadata differ stay apart."""
    root = tmp_path / "t"
    committer = make_committer(open_storage(str(root)), compact_interval=3, compaction=POLICY)
    for b in range(3):
        table = pa.table({"id": pa.array([b * 2, b * 2 + 1], pa.int64())})
        marked = table.replace_schema_metadata({"org.apache.spark.legacyDateTime": ""} if b == 1 else None)
        commit_files(committer, b, [marked.slice(0, 1), marked.slice(1, 1)])
    committer.close()
    assert not [n for n in live_names(root) if n.startswith("part-compacted-")]  # 2 + 2 of another kind: fewer than 4 each
    assert read_ids(root) == Counter(range(6))


def test_files_that_retention_drops_are_not_rewritten(tmp_path):
    """``retention`` drops expired entries at a compaction batch: a rewrite of them would keep
    their rows alive in the new file."""
    root = tmp_path / "t"
    committer = make_committer(open_storage(str(root)), compact_interval=3, retention_ms=1500, compaction=POLICY)
    for b in range(2):
        commit_batch(committer, Q, b, ids_of(b))
    time.sleep(2.0)  # batches 0 and 1 are older than the retention now
    commit_batch(committer, Q, 2, ids_of(2))
    committer.close()
    assert read_ids(root) == Counter(ids_of(2))


#: Spark's schema of the timestamp test's rows: readers pin Spark's microseconds
TS_SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
        ],
    }
)


def commit_files(committer, spark_batch: int, tables, *, schema: str | None = None, **write_options):
    """One batch of the given Arrow tables, one Parquet file each (rename mode)."""
    committer.ensure_open()
    with committer.batch(Q, spark_batch, mode="rename") as attempt:
        files = []
        for part, table in enumerate(tables):
            buf = io.BytesIO()
            pq.write_table(table, buf, **write_options)
            name = f"p=a/part-{part:05d}-{attempt.attempt}.c000.snappy.parquet"
            files.append(stage_file(committer.storage, attempt, name, buf.getvalue()))
        result = committer.commit(attempt, files, num_rows=sum(t.num_rows for t in tables), schema=schema)
    committer.janitor.drain()
    return result


def test_a_writer_frozen_before_its_compaction_batch_is_told_it_was_fenced(tmp_path):
    """The successor commits on and retention removes the manifest files the frozen writer's
    plan would read: it must wake to ``WriterFencedError``, not to a missing manifest file."""
    root = tmp_path / "t"
    storage = FaultInjectingStorage(open_storage(str(root)))
    opts = {"compact_interval": 3, "compaction": POLICY, "min_batches_to_retain": 1, "cleanup_delay_ms": 0}
    frozen = make_committer(storage, **opts)
    for b in range(5):
        commit_batch(frozen, Q, b, ids_of(b))

    def successor() -> None:
        taker = make_committer(open_storage(str(root)), **opts)
        taker.lease.clock = lambda: time.time() + 3600  # the frozen writer's lease has run out
        for b in range(5, 13):
            commit_batch(taker, "d0d0d0d0-0000-0000-0000-000000000000", b, ids_of(b))
            taker.janitor.drain()
        taker.close()

    # frozen while it stages batch 5, a compaction batch: it plans its rewrite after this
    storage.arm([Rule(Where(("put_if_absent",), r"^_seo/staging/[^/]+/data/", "before"), "call", callback=successor)])
    with pytest.raises(WriterFencedError):
        commit_batch(frozen, Q, 5, ids_of(5))
    frozen.close()
    assert read_ids(root) == Counter(i for x in range(13) for i in ids_of(x))


@pytest.mark.parametrize("mode", ["rename", "direct"])
def test_a_compaction_batch_that_failed_after_its_claim_keeps_its_rewrite_for_the_roll_forward(tmp_path, mode):
    """Compaction batch 2 fails in its move, after its claim named the staged rewrite; the writer
    then stops, holding the table. The rewrite must stay for the next start's roll-forward: a
    stopping writer deleted what it had prepared, and the claim could never complete."""
    root = tmp_path / "t"
    storage = FaultInjectingStorage(open_storage(str(root)))
    committer = make_committer(storage, compact_interval=3, compaction=POLICY)
    for b in range(2):
        commit_batch(committer, Q, b, ids_of(b), mode=mode)
    storage.arm(rules(fail_at="mid-move"))  # after the batch's first move
    with pytest.raises(Exception, match="injected failure"):
        commit_batch(committer, Q, 2, ids_of(2), mode=mode)
    committer.close()
    staged = [p.detail for p in verify_table(open_storage(str(root))).warnings if p.kind == "staging"]
    assert staged and all("pending claim names" in d for d in staged if mode == "rename"), staged
    again = make_committer(open_storage(str(root)), compact_interval=3, compaction=POLICY)
    report = again.open()
    again.close()
    # the rewrite's emptied staging went with the claim: it is no aborted attempt
    assert (report.rolled_forward, report.aborted_attempts) == ([2], []), report
    assert not list((root / "_seo" / "staging").iterdir())
    assert read_ids(root) == Counter(i for x in range(3) for i in ids_of(x))
    assert sum(n.startswith("part-compacted-2-") for n in live_names(root)) == 1


@pytest.mark.parametrize("mode", ["rename", "direct"])
def test_a_roll_forward_killed_after_its_claim_went_leaves_no_rewrite_staging_behind(tmp_path, mode):
    """The roll-forward of a compaction claim dies right after deleting the claim: the rewrite's
    emptied staging is gone already, so no later recovery takes it for an attempt that never
    claimed (an 'abort' verdict on a published rewrite, an "aborted attempt" in its report)."""
    root = tmp_path / "t"
    storage = FaultInjectingStorage(open_storage(str(root)))
    committer = make_committer(storage, compact_interval=3, compaction=POLICY)
    for b in range(2):
        commit_batch(committer, Q, b, ids_of(b), mode=mode)
    storage.arm(rules(fail_at="mid-move"))
    with pytest.raises(Exception, match="injected failure"):
        commit_batch(committer, Q, 2, ids_of(2), mode=mode)
    committer.close()
    dying = FaultInjectingStorage(open_storage(str(root)), rules(fail_at="after-wal-delete"))
    with pytest.raises(Exception, match="injected failure"):
        make_committer(dying, compact_interval=3, compaction=POLICY).open()
    again = make_committer(open_storage(str(root)), compact_interval=3, compaction=POLICY)
    report = again.open()
    again.close()
    assert report.aborted_attempts == [], report
    assert not [p.name for p in (root / "_seo" / "verdicts").glob("*-rw*")]
    assert read_ids(root) == Counter(i for x in range(3) for i in ids_of(x))


def test_verify_checks_each_retained_rewrite_against_the_files_it_replaced(tmp_path):
    """A compaction batch's commit record names its rewrites; ``seo verify`` finds a listing that
    names a new file beside one it replaced (rows read twice) and a new file whose rows differ."""
    root = tmp_path / "t"
    storage = open_storage(str(root))
    committer = make_committer(storage, compact_interval=3, compaction=POLICY)
    for b in range(4):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    record = next(r for r in committer.logs.commits.get(2) or [] if r.batch_id == 2)
    (note,) = record.rewrites
    assert note.rows == 20 and len(note.replaced) == 4 and note.final.startswith("p=a/part-compacted-2-")
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out

    manifest = ManifestLog(storage)
    delta = root / manifest.path(3)
    replaced = next(e for e in manifest.files(as_of=1) if e.path.endswith(note.replaced[0]))
    delta.write_bytes(manifest.encode([*manifest.read(3), replaced]))
    code, out = seo("--json", "verify", str(root))
    kinds = [p["kind"] for p in json.loads(out)["problems"]]
    assert code != 0 and "replaced-file-live" in kinds, out
    assert read_ids(root)[ids_of(0)[0]] == 2  # what the check is about: those rows are read twice


def test_a_partition_still_receiving_data_is_left_alone_for_its_quiet_period(tmp_path):
    """``quiet_period``: only partitions that received no file for that long are rewritten."""
    root = tmp_path / "t"
    policy = CompactionPolicy(target_size=1 << 20, min_files=4, min_age_ms=0, max_bytes=1 << 20, quiet_period_ms=1500)
    committer = make_committer(open_storage(str(root)), compact_interval=3, compaction=policy)
    expected: Counter = Counter()
    for b, partition in enumerate(["p=a", "p=b", "p=a", "p=b", "p=b", "p=b"]):
        if b == 2:
            time.sleep(2.0)  # p=a's files of batch 0 are quiet by now; batch 2 gives it a new one
        if b == 4:
            time.sleep(2.0)  # p=a has been quiet since batch 2, p=b receives batch 4
        commit_batch(committer, Q, b, ids_of(b), partition=partition)
        expected.update(ids_of(b))
        assert read_ids(root) == expected, f"after batch {b}"
    committer.close()
    names = {e.path.split("/")[-2] + "/" + e.path.rsplit("/", 1)[-1] for e in ManifestLog(open_storage(str(root))).files()}
    compacted = sorted(n.split("/")[0] for n in names if "/part-compacted-" in n)
    assert compacted == ["p=a"], names  # p=a (quiet) at batch 5; p=b received batch 4 just before
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


def test_every_python_reader_reads_every_row_once_at_every_batch(tmp_path):
    """pandas, polars (eager and lazy), DuckDB and a pyarrow dataset, as of every batch, on a
    table whose compaction batches replace files."""
    root = tmp_path / "t"
    committer = make_committer(open_storage(str(root)), compact_interval=3, compaction=POLICY)
    for b in range(7):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    assert any(n.startswith("part-compacted-") for n in live_names(root))
    for as_of in range(7):
        want = Counter(i for x in range(as_of + 1) for i in ids_of(x))
        t = str(root)
        got = {
            "pandas": Counter(read.pandas(t, as_of=as_of)["id"].tolist()),
            "polars": Counter(read.polars(t, as_of=as_of)["id"].to_list()),
            "polars lazy": Counter(read.polars(t, as_of=as_of, lazy=True).collect()["id"].to_list()),
            "duckdb": Counter(r[0] for r in read.duckdb(t, as_of=as_of).project("id").fetchall()),
            "dataset": Counter(read.dataset(t, as_of=as_of).to_table(columns=["id"]).column("id").to_pylist()),
        }
        for reader, seen in got.items():
            assert seen == want, f"{reader} as of batch {as_of}"


def test_a_rewrite_not_ready_in_time_is_published_by_the_next_compaction_batch(tmp_path):
    """The background rewrite planned for batch 2 is still writing when batch 2 commits: batch 2
    publishes nothing, batch 5 publishes it after checking it against the listing (a compaction
    batch came between)."""
    import threading

    root = tmp_path / "t"
    storage = FaultInjectingStorage(open_storage(str(root)))
    committer = make_committer(storage, compact_interval=3, compaction=POLICY)
    writing = threading.Event()
    storage.arm(
        [Rule(Where(("put_if_absent",), r"^_seo/staging/[^/]+-rw[0-9a-f]+-e\d+/rewrite/", "before"), "call", callback=lambda: writing.wait(30))]
    )
    for b in range(3):
        commit_only(committer, Q, b, ids_of(b))
    assert not [n for n in live_names(root) if n.startswith("part-compacted-")]
    writing.set()
    for b in range(3, 6):
        commit_batch(committer, Q, b, ids_of(b))
        assert read_ids(root) == Counter(i for x in range(b + 1) for i in ids_of(x)), f"after batch {b}"
    committer.close()
    assert any(n.startswith("part-compacted-2-") for n in live_names(root)), live_names(root)
    record = next(r for r in committer.logs.commits.get(5) or [] if r.batch_id == 5)
    assert len(record.rewrites) == 1 and len(record.rewrites[0].replaced) == 4
    for older in range(6):
        assert read_ids(root, as_of=older) == Counter(i for x in range(older + 1) for i in ids_of(x)), f"as of {older}"
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out


@pytest.mark.parametrize("delta", [False, True])
def test_a_claim_that_publishes_rewrites_is_a_v7_entry(tmp_path, monkeypatch, delta):
    """A release without compaction ignores the fields it does not know (``replaced``,
    ``rewrites``) and would publish the replaced files beside the new one: it must refuse the
    claim, so the claim is written as ``v7``."""
    from streaming_exactly_once.commit.protocol.sequence import CommitSequence

    written: list[bytes] = []
    real = CommitSequence.to_bytes
    monkeypatch.setattr(CommitSequence, "to_bytes", lambda self: written.append(real(self)) or written[-1])
    storage = open_storage(str(tmp_path / "t"))
    committer = (
        delta_committer(storage, compact_interval=3, compaction=POLICY) if delta else make_committer(storage, compact_interval=3, compaction=POLICY)
    )
    for b in range(3):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    assert [w.split(b"\n", 1)[0] == b"v7" for w in written] == [False, False, True]
    seq = CommitSequence.from_bytes(written[2], path="_seo/wal/2", batch_id=2)
    assert len(next(s for s in seq.steps if s.kind == "manifest").replaced) == 4


def _two_batches(root):
    """Batches 0 and 1 of a table (four small files, enough for a rewrite): its storage and listing."""
    storage = open_storage(str(root))
    committer = make_committer(storage, compact_interval=3, compaction=POLICY)
    for b in range(2):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    return storage, ManifestLog(storage).files()


def test_a_registered_consumer_holds_back_the_files_it_has_not_read(tmp_path):
    """A rewrite takes only files every registered consumer has read and that are below its
    horizon (the newest file it read minus its maxFileAge): a lagging consumer, one whose
    checkpoint cannot be read and one whose horizon is far behind all hold files back."""
    from streaming_exactly_once.commit.rewrites.compaction_consumers import Consumer

    for case in ("lagging", "missing", "far"):
        root = tmp_path / case / "t"
        storage, listing = _two_batches(root)
        ckpt = tmp_path / case / "down"
        if case == "lagging":
            consumer_checkpoint(ckpt, listing[:2])  # batch 0's files only: fewer than min_files
            consumers = (Consumer(str(ckpt), 0),)
        elif case == "missing":  # one consumer read everything, the other's checkpoint is not there
            consumer_checkpoint(ckpt, listing)
            consumers = (Consumer(str(ckpt), 0), Consumer(str(tmp_path / case / "nowhere"), 0))
        else:  # read everything, but 7 days of maxFileAge put its horizon before every file
            consumer_checkpoint(ckpt, listing, later_ms=0)
            consumers = (Consumer(str(ckpt), 7 * 86_400_000),)
        policy = CompactionPolicy(**{**POLICY.__dict__, "consumers": consumers})
        c = make_committer(storage, compact_interval=3, compaction=policy)
        commit_batch(c, Q, 2, ids_of(2))  # compaction batch 2: nothing may be rewritten
        c.close()
        assert not any(n.startswith("part-compacted-") for n in live_names(root)), (case, live_names(root))
        assert read_ids(root) == Counter(i for b in range(3) for i in ids_of(b))
        if case == "lagging":  # it reads batch 1's files too: the next compaction batch rewrites the four it read
            consumer_checkpoint(ckpt, listing[2:])
            c = make_committer(storage, compact_interval=3, compaction=policy)
            for b in range(3, 6):
                commit_batch(c, Q, b, ids_of(b))
            c.close()
            compacted = [n for n in live_names(root) if n.startswith("part-compacted-")]
            assert len(compacted) == 1 and compacted[0].startswith("part-compacted-5-"), live_names(root)
            live = {e.path for e in ManifestLog(storage).files()}
            assert not {e.path for e in listing} & live, "a file the consumer read is still live"
            assert read_ids(root) == Counter(i for b in range(6) for i in ids_of(b))
            code, out = seo("--json", "verify", str(root))
            assert code == 0 and json.loads(out)["problems"] == [], out


def test_each_file_source_of_a_consumer_is_checked_on_its_own(tmp_path):
    """A query that reads the table twice (a self-union) has two file sources, each with its own
    seen files and horizon: one that has read all the files does not vouch for the other."""
    from streaming_exactly_once.commit.rewrites.compaction_consumers import Consumer

    root, ckpt = tmp_path / "t", tmp_path / "down"
    storage, listing = _two_batches(root)
    consumer_checkpoint(ckpt, listing, source_id=0)  # read everything
    consumer_checkpoint(ckpt, listing[:1], source_id=1)  # one file so far (maxFilesPerTrigger=1)
    policy = CompactionPolicy(**{**POLICY.__dict__, "consumers": (Consumer(str(ckpt), 0),)})
    committer = make_committer(storage, compact_interval=3, compaction=policy)
    commit_batch(committer, Q, 2, ids_of(2))
    committer.close()
    assert not any(n.startswith("part-compacted-") for n in live_names(root)), live_names(root)


def test_a_consumer_reset_between_the_planning_and_the_compaction_batch_stops_the_rewrite(tmp_path):
    """The rewrite was planned while the consumer had read everything; its checkpoint is then
    deleted and the query restarted, reading one file so far: the compaction batch checks the
    consumers again before its claim and publishes no rewrite."""
    import shutil

    from streaming_exactly_once.commit.rewrites.compaction_consumers import Consumer

    root, ckpt = tmp_path / "t", tmp_path / "down"
    storage, listing = _two_batches(root)
    consumer_checkpoint(ckpt, listing)
    policy = CompactionPolicy(**{**POLICY.__dict__, "consumers": (Consumer(str(ckpt), 0),)})
    committer = make_committer(storage, compact_interval=3, compaction=policy)
    committer.ensure_open()
    committer.janitor.drain()  # planned at the start, with the consumer caught up
    assert committer.rewrites.preparation.ready, "no rewrite was prepared"
    shutil.rmtree(ckpt)
    consumer_checkpoint(ckpt, listing[:1])  # the query restarted from scratch
    commit_batch(committer, Q, 2, ids_of(2))
    committer.close()
    assert not any(n.startswith("part-compacted-") for n in live_names(root)), live_names(root)
    assert read_ids(root) == Counter(i for b in range(3) for i in ids_of(b))
    assert not list((root / "_seo" / "staging").glob("*-rw*")), "the dropped rewrite was left staged"


def test_seo_compact_refuses_a_consumer_location_with_no_checkpoint_and_says_which_consumer_blocks(tmp_path):
    root, ckpt = tmp_path / "t", tmp_path / "down"
    storage = open_storage(str(root))
    committer = make_committer(storage, compact_interval=3)
    for b in range(2):
        commit_batch(committer, Q, b, ids_of(b))
    committer.close()
    code, out = seo("compact", str(root), "--min-age", "0s", "--min-files", "4", "--consumer", str(tmp_path / "run=1"))
    assert code == 1 and "no Spark checkpoint there" in out and "run=1" in out, out
    consumer_checkpoint(ckpt, [])  # a checkpoint whose source has read only a file elsewhere
    (ckpt / "sources" / "0" / "0").write_text('v1\n{"path":"file:///elsewhere/x.parquet","timestamp":1,"batchId":0}')
    for dry in ([], ["--dry-run"]):
        code, out = seo("--json", "compact", str(root), "--min-age", "0s", "--min-files", "4", "--consumer", str(ckpt), *dry)
        report = json.loads(out)
        assert code == 0 and report["rewrites"] == [] and "has read no file" in report["blockedBy"], out
