"""A downstream ``readStream.parquet(table)`` that is caught up and runs throughout reads every row
once through compactions of an *idle* table: ``seo compact`` of a table stopped for longer than
``min_age``, and a writer that restarts after such a pause (a query that has not run since the
first batch after it has the last file before the pause as its horizon). Spark's file source skips the new file only if its timestamp is below the
newest file it has read minus its ``maxFileAge``; ``min_age`` is therefore measured on the
table's own clock (the newest live file's timestamp), never on the wall clock - an idle table's
files do not age. Once newer files arrive the old ones are rewritten, and still read once."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from streaming_exactly_once import ExactlyOnceSink
from streaming_exactly_once.commit.rewrites.data_compaction import CompactionPolicy
from streaming_exactly_once.maintenance.compact import compact_table
from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from tests.sink.conftest import assert_exactly_once

pytestmark = pytest.mark.spark

#: the downstream query's maxFileAge, below MIN_AGE (the condition docs/compaction.md states)
MAX_FILE_AGE = "1s"
MIN_AGE_S = 3
#: the upstream query the batches are written for (the sink is called as foreachBatch would)
Q = "0d0d0d0d-0000-0000-0000-000000000001"


def _batch(spark, sink, b: int, acked: list[int]) -> None:
    rows = [(b * 100 + i, "a") for i in range(4)]
    sink(spark.createDataFrame(rows, "id LONG, p STRING").coalesce(1), b)
    acked += [r[0] for r in rows]


def _downstream(spark, table, ckpt, seen: list[int]):
    reader = spark.readStream.schema("id LONG, p STRING").option("maxFileAge", MAX_FILE_AGE)
    return (
        reader.parquet(str(table))
        .writeStream.foreachBatch(lambda df, _: seen.extend(r.id for r in df.select("id").collect()))
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def _caught_up(seen: list[int], acked: list[int], timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while Counter(seen) != Counter(acked):
        dups = [i for i, c in Counter(seen).items() if c > 1]
        assert not dups, f"the downstream query read {len(dups)} ids twice, e.g. {sorted(dups)[:5]}"
        assert time.time() < deadline, f"the downstream query did not catch up: {len(seen)} rows read of {len(acked)}"
        time.sleep(0.2)


def _compacted(table) -> list[str]:
    names = [e.uri.rsplit("/", 1)[-1] for e in ManifestLog(open_storage(str(table))).files()]
    return [n for n in names if n.startswith("part-compacted-")]


def _settle(seen: list[int], acked: list[int]) -> None:
    """A few more triggers of the downstream query: a file it took as new would be read by now."""
    time.sleep(2.5)
    _caught_up(seen, acked)


def test_seo_compact_of_an_idle_table_is_read_once_by_a_caught_up_downstream_query(spark, tmp_path):
    table, acked, seen = tmp_path / "t", [], []
    sink = ExactlyOnceSink(str(table), partition_by=["p"], compact_interval=3, query_id=Q)
    for b in range(3):
        _batch(spark, sink, b, acked)
    sink.close()
    query = _downstream(spark, table, tmp_path / "down", seen)
    try:
        _caught_up(seen, acked)
        time.sleep(MIN_AGE_S + 1)  # older than min_age on the clock, not on the table's own
        policy = CompactionPolicy(target_size=1 << 20, min_files=2, min_age_ms=MIN_AGE_S * 1000, max_bytes=1 << 30)
        report = compact_table(open_storage(str(table)), policy)
        _settle(seen, acked)
        assert report.rewrites == [] and not _compacted(table), report
        assert report.why_nothing is not None and "before the table's newest file" in report.why_nothing, report.why_nothing
        # newer data arrives after the pause: the old files are min_age older than the newest one,
        # but the pause is not yet min_age old - a query may not have run since batch 3
        sink = ExactlyOnceSink(str(table), partition_by=["p"], compact_interval=3, query_id=Q)
        _batch(spark, sink, 3, acked)
        sink.close()
        _caught_up(seen, acked)
        report = compact_table(open_storage(str(table)), policy)
        assert report.rewrites == [] and report.why_nothing is not None and "longest pause" in report.why_nothing, report
        # once batch 3 is min_age below the newest file, the files before the pause are rewritten
        time.sleep(MIN_AGE_S + 1)
        sink = ExactlyOnceSink(str(table), partition_by=["p"], compact_interval=3, query_id=Q)
        _batch(spark, sink, 4, acked)
        sink.close()
        _caught_up(seen, acked)
        report = compact_table(open_storage(str(table)), policy)
        assert sorted(len(r.files) for r in report.rewrites) == [3] and len(_compacted(table)) == 1, report
        _settle(seen, acked)
    finally:
        query.stop()
    assert_exactly_once(spark, table, acked)


def test_a_writer_restarting_after_a_pause_publishes_no_rewrite_a_caught_up_query_would_read_again(spark, tmp_path):
    """Batches 0-3, a pause longer than min_age, batch 4 and compaction batch 5 before the
    downstream query runs again (stopped here; a slow trigger is the same): its horizon is batch
    3's file, so a rewrite of batches 0-3 (stamped as batch 3's file) would be new to it. None is
    published until the pause is min_age old; then batch 8 rewrites them, read once."""
    table, acked, seen = tmp_path / "t", [], []
    options = {
        "partition_by": ["p"],
        "compact_interval": 3,
        "query_id": Q,
        "compaction": {"min_files": 2, "min_age": f"{MIN_AGE_S}s", "target_size": "1MB"},
    }
    sink = ExactlyOnceSink(str(table), **options)
    for b in range(4):  # batch 2 compacts nothing: every file is younger than min_age
        _batch(spark, sink, b, acked)
    sink.close()
    query = _downstream(spark, table, tmp_path / "down", seen)
    _caught_up(seen, acked)
    query.processAllAvailable()  # its last batch committed: a stop inside it would replay it
    query.stop()
    query = None
    try:
        time.sleep(MIN_AGE_S + 1)
        sink = ExactlyOnceSink(str(table), **options)
        _batch(spark, sink, 4, acked)
        time.sleep(1.5)  # a rewrite planned after batch 4 would be written by now
        _batch(spark, sink, 5, acked)  # compaction batch: batches 0-3 are min_age below batch 4, the pause is not
        assert not _compacted(table)
        query = _downstream(spark, table, tmp_path / "down", seen)
        _settle(seen, acked)
        time.sleep(MIN_AGE_S + 1)
        for b in (6, 7):
            _batch(spark, sink, b, acked)
        _caught_up(seen, acked)
        time.sleep(1.5)  # the rewrite planned after batch 7 is written
        _batch(spark, sink, 8, acked)  # compaction batch: batch 5 is min_age below batch 7, the pause too
        sink.close()
        assert len(_compacted(table)) == 1, _compacted(table)
        _settle(seen, acked)
    finally:
        if query is not None:
            query.stop()
    assert_exactly_once(spark, table, acked)


def test_a_registered_consumers_planned_batch_is_never_rewritten_and_its_restart_reads_every_row_once(spark, tmp_path):
    """A registered consumer commits its batch 0 (batches 0-2's files) and dies in batch 1, planned
    over batches 3-4's files. ``seo compact`` may rewrite only what the consumer committed: a
    planned batch is re-run from its files by path, so its files must stay - the retention of
    the table's log and ``seo gc`` would otherwise delete them, and the restarted consumer would
    silently lose their rows."""
    from streaming_exactly_once.commit.rewrites.compaction_consumers import Consumer
    from streaming_exactly_once.maintenance.gc import collect_garbage
    from tests.commit.helpers import make_committer
    from tests.delta.helpers import commit_batch

    table, ckpt, storage = tmp_path / "t", tmp_path / "down", open_storage(str(tmp_path / "t"))
    acked: list[int] = []

    def batches(committer, ids: range) -> None:
        for b in ids:
            rows = list(range(b * 10, b * 10 + 4))
            commit_batch(committer, Q, b, rows)
            acked.extend(rows)

    writer = make_committer(storage, compact_interval=3, partition_by=("p",))
    batches(writer, range(2))
    for b in (2, 3, 4):  # each 1.2 s newer than the one before: beyond the consumer's maxFileAge of 1 s
        time.sleep(1.2)
        batches(writer, range(b, b + 1))
    writer.close()
    seen: list[int] = []

    def consume(df, batch_id: int) -> None:
        if batch_id == 1 and not seen_restart:
            raise RuntimeError("the downstream worker is lost mid-batch")
        seen.extend(r.id for r in df.select("id").collect())

    seen_restart = False
    reader = spark.readStream.schema("id LONG, p STRING").option("maxFileAge", MAX_FILE_AGE).option("maxFilesPerTrigger", 6)
    query = reader.parquet(str(table)).writeStream.foreachBatch(consume).option("checkpointLocation", str(ckpt)).start()
    with pytest.raises(Exception, match="lost mid-batch"):
        query.awaitTermination(120)
    assert sorted(seen) == sorted(acked[:12]) and not (ckpt / "commits" / "1").exists() and (ckpt / "offsets" / "1").exists()
    policy = CompactionPolicy(target_size=1 << 20, min_files=2, min_age_ms=0, max_bytes=1 << 30, consumers=(Consumer(str(ckpt), 1000),))
    report = compact_table(storage, policy)
    writer = make_committer(storage, compact_interval=3, partition_by=("p",), min_batches_to_retain=1, cleanup_delay_ms=0)
    batches(writer, range(7, 10))  # the table's log retention drops the batches that named the replaced files
    writer.close()
    collect_garbage(storage, older_than_ms=0)
    seen_restart = True
    query = reader.parquet(str(table)).writeStream.foreachBatch(consume).option("checkpointLocation", str(ckpt))
    query.trigger(availableNow=True).start().awaitTermination(120)
    twice = [i for i, c in Counter(seen).items() if c > 1]
    assert Counter(seen) == Counter(acked), f"missing {sorted(set(acked) - set(seen))[:8]}, read twice {twice[:8]}"
    rewritten = {f for r in report.rewrites for f in r.files}
    assert len(rewritten) == 4, report  # batches 0-1: below the horizon of what the consumer committed


def test_a_registered_consumer_reading_newest_first_with_a_file_limit_stops_every_rewrite(spark, tmp_path):
    """``latestFirst`` with ``maxFilesPerTrigger`` makes Spark ignore ``maxFileAge``: such a consumer
    would read every rewrite as new data. Its checkpoint does not record its options, but the
    order it admitted a backlog in shows it: registered, it stops every rewrite, and says why. The
    same backlog read oldest first (Spark's default) does not."""
    from streaming_exactly_once.commit.rewrites.compaction_consumers import Consumer, consumer_filter
    from tests.commit.helpers import make_committer
    from tests.delta.helpers import commit_batch

    table, storage = tmp_path / "t", open_storage(str(tmp_path / "t"))
    writer = make_committer(storage, compact_interval=3, partition_by=("p",))
    for b in range(4):
        commit_batch(writer, Q, b, list(range(b * 10, b * 10 + 4)))
        time.sleep(0.05)
    writer.close()
    verdicts = {}
    for latest_first in (True, False):
        ckpt = tmp_path / f"down-{latest_first}"
        reader = spark.readStream.schema("id LONG, p STRING").option("maxFilesPerTrigger", 2).option("latestFirst", latest_first)
        query = reader.parquet(str(table)).writeStream.foreachBatch(lambda df, _: None).option("checkpointLocation", str(ckpt))
        query.trigger(availableNow=True).start().awaitTermination(120)
        verdicts[latest_first] = consumer_filter((Consumer(str(ckpt), 1000),), storage.root_uri).blocked
    assert verdicts[True] is not None and "newest first" in verdicts[True], verdicts
    assert verdicts[False] is None, verdicts
