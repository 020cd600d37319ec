"""Exactly once for a Kafka-like source across lost checkpoints: real streaming queries over the
stand-in source (``streaming_exactly_once.testing.fake_kafka``), every record counted in the table."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from streaming_exactly_once import DatasetSink, ExactlyOnceSink, read
from streaming_exactly_once.cli.main import main
from streaming_exactly_once.errors import CheckpointRewoundError, OffsetColumnsMissingError, OffsetGapError
from streaming_exactly_once.testing.fake_kafka import FakeKafka, expire, produce

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def kafka(spark):
    spark.dataSource.register(FakeKafka)
    return spark


def records(topic, partition, start, n):
    return [f"{topic}-{partition}-{i}" for i in range(start, start + n)]


def fill(root, topic, partitions, start, n):
    out = []
    for p in range(partitions):
        produce(root, topic, p, records(topic, p, start, n))
        out += records(topic, p, start, n)
    return out


def stream(spark, root, topics="t", *, starting="earliest", lose="true", keep_offsets=True):
    df = (
        spark.readStream.format("fakekafka")
        .option("path", str(root))
        .option("subscribe", topics)
        .option("startingOffsets", starting)
        .option("failOnDataLoss", lose)
        .load()
    )
    cols = ["CAST(value AS STRING) AS id"] + (["topic", "partition", "offset"] if keep_offsets else [])
    return df.selectExpr(*cols)


def run(sink, df, checkpoint):
    """One availableNow run; the query's error (or None)."""
    query = sink.start(df, checkpoint_location=str(checkpoint), trigger={"availableNow": True})
    try:
        query.awaitTermination()
        return None
    except StreamingQueryException as exc:
        return exc
    finally:
        sink.close()


def ids(table):
    return Counter(read.arrow(str(table), columns=["id"]).column("id").to_pylist())


def assert_once(table, expected):
    counts = ids(table)
    assert {i: c for i, c in counts.items() if c > 1} == {}, "duplicates"
    assert set(counts) == set(expected), (sorted(set(expected) - set(counts))[:5], sorted(set(counts) - set(expected))[:5])


def test_a_recreated_checkpoint_from_earliest_writes_no_record_twice(kafka, tmp_path, capsys):
    src, table = tmp_path / "kafka", tmp_path / "t"
    first = fill(src, "t", 2, 0, 10)
    assert run(ExactlyOnceSink(str(table)), stream(kafka, src), tmp_path / "c1") is None
    more = fill(src, "t", 2, 10, 5)
    sink = ExactlyOnceSink(str(table))
    assert run(sink, stream(kafka, src), tmp_path / "c2") is None  # a new checkpoint: Kafka starts over
    assert_once(table, first + more)
    assert sink.counters["skipped_rows"] == 20
    assert json.loads(sink.starting_offsets()) == {"t": {"0": 15, "1": 15}}
    capsys.readouterr()
    main(["status", str(table), "--json"])  # what an operator sees
    assert json.loads(capsys.readouterr().out)["sourceOffsets"] == {"t/0": 15, "t/1": 15}


def test_a_checkpoint_recreated_from_latest_is_refused_not_silently_skipped(kafka, tmp_path):
    src, table = tmp_path / "kafka", tmp_path / "t"
    first = fill(src, "t", 2, 0, 10)
    assert run(ExactlyOnceSink(str(table)), stream(kafka, src), tmp_path / "c1") is None
    fill(src, "t", 2, 10, 5)  # arrive while no query runs
    late = ExactlyOnceSink(str(table))
    run(late, stream(kafka, src, starting="latest"), tmp_path / "c2")  # starts at 15: nothing to read yet
    fill(src, "t", 2, 15, 3)
    error = run(ExactlyOnceSink(str(table)), stream(kafka, src, starting="latest"), tmp_path / "c2")
    assert error is not None and isinstance(error, OffsetGapError) and "t/0 [10, 15)" in str(error), error
    assert "startingOffsets=" in str(error)
    assert_once(table, first)  # nothing of the refused batch was written
    # the operator restarts from where the table is: every record once, none skipped
    sink = ExactlyOnceSink(str(table))
    starting = sink.starting_offsets()
    assert json.loads(starting) == {"t": {"0": 10, "1": 10}}
    assert run(sink, stream(kafka, src, starting=starting), tmp_path / "c3") is None
    assert_once(table, first + records("t", 0, 10, 8) + records("t", 1, 10, 8))


def test_a_checkpoint_put_back_to_an_older_copy_is_refused_before_it_loses_records(kafka, tmp_path):
    """An older copy of the checkpoint restored at its path: Spark re-plans batch 1, which the
    table holds with offsets 10-15, up to the topic's new end. Skipped as a replay, offsets 15-20
    would be lost; the batch is refused, nothing written, and a new checkpoint from the table's
    offsets writes each record once."""
    src, table, ckpt = tmp_path / "kafka", tmp_path / "t", tmp_path / "c"
    first = fill(src, "t", 1, 0, 10)
    assert run(ExactlyOnceSink(str(table)), stream(kafka, src), ckpt) is None
    shutil.copytree(ckpt, tmp_path / "older")
    second = fill(src, "t", 1, 10, 5)
    assert run(ExactlyOnceSink(str(table)), stream(kafka, src), ckpt) is None
    shutil.rmtree(ckpt)
    shutil.copytree(tmp_path / "older", ckpt)
    third = fill(src, "t", 1, 15, 5)
    error = run(ExactlyOnceSink(str(table)), stream(kafka, src), ckpt)
    assert isinstance(error, CheckpointRewoundError) and "now plans it with the source offsets" in str(error), error
    assert_once(table, first + second)
    sink = ExactlyOnceSink(str(table))
    assert run(sink, stream(kafka, src, starting=sink.starting_offsets()), tmp_path / "c2") is None
    assert_once(table, first + second + third)


@pytest.mark.parametrize("query_id", [None, "orders"])
def test_allow_offset_gaps_skips_the_gap_on_purpose(kafka, tmp_path, capsys, query_id):
    """The gap is skipped, and the batch's ledger says it was allowed, so ``seo audit`` passes -
    also under a given ``query_id``, which the table knows from the checkpoint before."""
    src, table = tmp_path / "kafka", tmp_path / "t"
    first = fill(src, "t", 1, 0, 4)
    assert run(ExactlyOnceSink(str(table), query_id=query_id), stream(kafka, src), tmp_path / "c1") is None
    fill(src, "t", 1, 4, 6)
    later = records("t", 0, 8, 2)
    assert run(ExactlyOnceSink(str(table), query_id=query_id), stream(kafka, src, starting=json.dumps({"t": {"0": 8}})), tmp_path / "c2") is not None
    sink = ExactlyOnceSink(str(table), allow_offset_gaps=True, query_id=query_id)
    assert run(sink, stream(kafka, src, starting=json.dumps({"t": {"0": 8}})), tmp_path / "c3") is None
    assert_once(table, first + later)
    capsys.readouterr()
    try:
        main(["--json", "audit", str(table), "--from", "0"])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["violations"] == [], out  # before: "no allowed gap is recorded" under a given query_id


def test_expired_records_are_reported_as_a_gap(kafka, tmp_path):
    src, table = tmp_path / "kafka", tmp_path / "t"
    first = fill(src, "t", 1, 0, 5)
    assert run(ExactlyOnceSink(str(table)), stream(kafka, src), tmp_path / "c1") is None
    fill(src, "t", 1, 5, 5)
    expire(src, "t", 0, 7)  # retention removed 5 and 6 before any query read them
    error = run(ExactlyOnceSink(str(table)), stream(kafka, src, lose="false"), tmp_path / "c2")
    assert error is not None and isinstance(error, OffsetGapError) and "t/0 [5, 7)" in str(error), error
    assert_once(table, first)


def test_a_batch_without_its_offset_columns_is_refused_by_name(kafka, tmp_path):
    src, table = tmp_path / "kafka", tmp_path / "t"
    first = fill(src, "t", 1, 0, 5)
    assert run(ExactlyOnceSink(str(table)), stream(kafka, src), tmp_path / "c1") is None
    fill(src, "t", 1, 5, 2)
    error = run(ExactlyOnceSink(str(table)), stream(kafka, src, keep_offsets=False), tmp_path / "c2")
    assert error is not None and isinstance(error, OffsetColumnsMissingError) and "offset" in str(error)
    assert_once(table, first)
    # Kafka's own source records where a checkpoint's first batch starts (sources/<i>/0, a zero
    # byte, "v1" and the offsets): from the table's offsets, no column is needed
    sink = ExactlyOnceSink(str(table))
    starting = sink.starting_offsets()
    (tmp_path / "c3" / "sources" / "0").mkdir(parents=True)
    (tmp_path / "c3" / "sources" / "0" / "0").write_bytes(b"\0v1\n" + starting.encode())
    assert run(sink, stream(kafka, src, starting=starting, keep_offsets=False), tmp_path / "c3") is None
    assert_once(table, first + records("t", 0, 5, 2))


def test_new_partitions_and_a_second_topic(kafka, tmp_path):
    src, table = tmp_path / "kafka", tmp_path / "t"
    first = fill(src, "t", 2, 0, 4)
    assert run(ExactlyOnceSink(str(table)), stream(kafka, src), tmp_path / "c1") is None
    produce(src, "t", 2, records("t", 2, 0, 3))  # the topic grew a partition
    other = fill(src, "u", 1, 0, 3)  # and the query now reads a second topic too
    union = stream(kafka, src, "t").unionByName(stream(kafka, src, "u"))
    assert run(ExactlyOnceSink(str(table)), union, tmp_path / "c2") is None
    assert_once(table, first + records("t", 2, 0, 3) + other)
    assert json.loads(ExactlyOnceSink(str(table)).starting_offsets(["u"])) == {"u": {"0": 3}}


def test_a_restarted_query_after_empty_batches_is_not_a_gap(kafka, tmp_path):
    """Batches whose rows the query filtered away commit nothing; the query still continues."""
    src, table = tmp_path / "kafka", tmp_path / "t"
    first = fill(src, "t", 1, 0, 3)
    df = lambda: stream(kafka, src).where("id NOT LIKE 't-0-1_'")  # noqa: E731 - drops offsets 10..19
    assert run(ExactlyOnceSink(str(table)), df(), tmp_path / "c") is None
    fill(src, "t", 1, 3, 17)
    assert run(ExactlyOnceSink(str(table)), df(), tmp_path / "c") is None
    fill(src, "t", 1, 20, 2)
    assert run(ExactlyOnceSink(str(table)), df(), tmp_path / "c") is None
    assert_once(table, first + records("t", 0, 3, 7) + records("t", 0, 20, 2))


def test_a_partition_added_while_stopped_starts_at_minus_two_as_documented(kafka, tmp_path):
    """docs/kafka.md: sink.starting_offsets() names the partitions the table holds records of; a
    partition it has none of gets -2 (earliest), which the stand-in resolves as Kafka does."""
    src, table = tmp_path / "kafka", tmp_path / "t"
    first = fill(src, "t", 1, 0, 3)
    assert run(ExactlyOnceSink(str(table)), stream(kafka, src), tmp_path / "c1") is None
    produce(src, "t", 1, records("t", 1, 0, 2))  # a partition added while no query runs
    sink = ExactlyOnceSink(str(table))
    start = json.loads(sink.starting_offsets())
    sink.close()
    assert start == {"t": {"0": 3}}
    start["t"]["1"] = -2
    assert run(ExactlyOnceSink(str(table)), stream(kafka, src, starting=json.dumps(start)), tmp_path / "c2") is None
    assert_once(table, first + records("t", 1, 0, 2))


def test_a_dataset_group_drops_what_it_holds_too(kafka, tmp_path):
    src, root = tmp_path / "kafka", tmp_path / "g"
    first = fill(src, "t", 2, 0, 5)
    sink = lambda: DatasetSink(str(root), dataset_column="topic")  # noqa: E731
    assert run(sink(), stream(kafka, src), tmp_path / "c1") is None
    more = fill(src, "t", 2, 5, 2)
    again = sink()
    assert run(again, stream(kafka, src), tmp_path / "c2") is None
    assert_once(root / "t", first + more)
    assert json.loads(again.starting_offsets()) == {"t": {"0": 7, "1": 7}}


@pytest.mark.connect
@pytest.mark.long
def test_a_lost_checkpoint_under_spark_connect(tmp_path):
    import subprocess
    import sys

    from tests.sink.conftest import REPO

    src, table = tmp_path / "kafka", tmp_path / "t"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.sink.connect_kafka", str(src), str(table), str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    steps = {s["step"]: s for s in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))}
    assert proc.returncode == 0 and len(steps) == 3, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert steps["first"]["error"] is None and steps["recreated-earliest"]["error"] is None, steps
    assert "OffsetGapError" in (steps["recreated-latest"]["error"] or ""), steps
    assert_once(table, records("t", 0, 0, 15) + records("t", 1, 0, 15))


def test_a_kafka_stream_unioned_with_a_file_source_writes_each_record_once_after_a_lost_checkpoint(kafka, tmp_path):
    """The file source keeps its log at ``sources/1/0``, where Kafka's source keeps its start: the
    stand-in (like any source that records no start) starts where its rows do, per source; and
    the Kafka rows, which no input file names, are the offset guard's, not unattributed rows."""
    src, files, table = tmp_path / "kafka", tmp_path / "files", tmp_path / "t"
    files.mkdir()

    def union():
        return stream(kafka, src).unionByName(kafka.readStream.schema("id string").json(str(files)), allowMissingColumns=True)

    first = fill(src, "t", 1, 0, 10)
    (files / "f1.json").write_text("".join(json.dumps({"id": f"f1-{i}"}) + "\n" for i in range(5)))
    assert run(ExactlyOnceSink(str(table)), union(), tmp_path / "c1") is None
    more = fill(src, "t", 1, 10, 3)
    (files / "f2.json").write_text("".join(json.dumps({"id": f"f2-{i}"}) + "\n" for i in range(2)))
    sink = ExactlyOnceSink(str(table))
    assert run(sink, union(), tmp_path / "c2") is None  # from earliest, every file again
    assert_once(table, first + more + [f"f1-{i}" for i in range(5)] + ["f2-0", "f2-1"])
    assert sink.counters["skipped_rows"] == 15


@pytest.mark.parametrize("kind", ["table", "group"])
def test_a_query_restarted_from_the_tables_offsets_whose_first_batch_its_filter_empties_goes_on(kafka, tmp_path, kind):
    """The first batch of a query the table does not know is committed though it has no rows:
    the next batch, and a restart, are a known query's, not a gap."""
    src, root, checkpoint = tmp_path / "kafka", tmp_path / "t", tmp_path / "c2"
    sink = (lambda: ExactlyOnceSink(str(root))) if kind == "table" else (lambda: DatasetSink(str(root), dataset_column="topic"))
    table = root if kind == "table" else root / "t"
    first = fill(src, "t", 1, 0, 4)
    assert run(sink(), stream(kafka, src), tmp_path / "c1") is None
    opened = sink()
    starting = opened.starting_offsets()
    opened.close()
    (checkpoint / "sources" / "0").mkdir(parents=True)
    (checkpoint / "sources" / "0" / "0").write_bytes(b"\0v1\n" + starting.encode())  # as Kafka's source records its start
    query = lambda: stream(kafka, src, starting=starting).where("id NOT LIKE 'noise%'")  # noqa: E731
    produce(src, "t", 0, ["noise-0", "noise-1"])  # offsets 4, 5: the filter drops them
    assert run(sink(), query(), checkpoint) is None
    later = records("t", 0, 6, 2)
    produce(src, "t", 0, later)
    assert run(sink(), query(), checkpoint) is None
    produce(src, "t", 0, ["t-0-8"])
    assert run(sink(), query(), checkpoint) is None
    assert_once(table, [*first, *later, "t-0-8"])


def test_a_new_checkpoint_under_a_given_query_id_is_a_new_query_not_a_replay(kafka, tmp_path):
    """``query_id=`` keeps the id across checkpoints; the checkpoint's own id tells its batch 0
    from the old checkpoint's, so it goes through the offset guard and is written."""
    src, table = tmp_path / "kafka", tmp_path / "t"
    first = fill(src, "t", 1, 0, 5)

    def run_as(checkpoint):
        sink = ExactlyOnceSink(str(table), query_id="events-ingest", checkpoint_location=str(checkpoint))
        query = stream(kafka, src).writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
        query = query.trigger(availableNow=True).start()
        try:
            query.awaitTermination()
        finally:
            sink.close()
        return sink

    assert run_as(tmp_path / "c1").counters["committed"] == 1
    more = fill(src, "t", 1, 5, 3)
    again = run_as(tmp_path / "c2")
    assert again.counters["duplicates"] == 0 and again.counters["skipped_rows"] == 5
    assert_once(table, first + more)
    last = max(int(p.name) for p in (tmp_path / "c2" / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):  # Spark runs that batch again: a replay
        (tmp_path / "c2" / "commits" / name).unlink(missing_ok=True)
    replay = run_as(tmp_path / "c2")
    assert replay.counters["duplicates"] == 1 and replay.counters["committed"] == 0
    assert_once(table, first + more)


@pytest.mark.parametrize(("fmt", "earlier_release"), [("delta", False), ("iceberg", False), ("iceberg", True)])
def test_a_new_query_s_empty_first_batch_at_a_compaction_batch_id_keeps_the_table_format_in_step(kafka, tmp_path, monkeypatch, fmt, earlier_release):
    """The first batch of a query the table does not know is committed even when its filter left
    no row (it records where the query starts). Landing on a compaction batch id (a ``.compact``
    manifest file), it must not leave the Delta/Iceberg log a batch behind: ``as_of`` that batch
    reads the table, ``seo verify`` passes, and the next batch commits to the format too.
    ``earlier_release``: the batch got no format commit, as before that rule - the table is still
    verified, read as of that batch and written on (the ``.compact`` lists no new file)."""
    src, table = tmp_path / "kafka", tmp_path / "t"
    first = fill(src, "t", 1, 0, 2)
    opts = {"format": fmt, "compact_interval": 3, "partition_by": ["p"]}  # partitioned: a batch of no row writes no file
    assert run(ExactlyOnceSink(str(table), **opts), stream(kafka, src).withColumn("p", F.lit("x")), tmp_path / "c1") is None  # batch 0
    first += fill(src, "t", 1, 2, 2)
    assert run(ExactlyOnceSink(str(table), **opts), stream(kafka, src).withColumn("p", F.lit("x")), tmp_path / "c1") is None  # batch 1
    sink = ExactlyOnceSink(str(table), **opts)
    fill(src, "t", 1, 4, 1)
    starting = sink.starting_offsets()
    (tmp_path / "c2" / "sources" / "0").mkdir(parents=True)  # where it starts, as Kafka's source records it
    (tmp_path / "c2" / "sources" / "0" / "0").write_bytes(b"\0v1\n" + starting.encode())
    empty = stream(kafka, src, starting=starting).withColumn("p", F.lit("x")).where("id = 'none'")
    with monkeypatch.context() as patch:
        if earlier_release:
            from dataclasses import replace

            from streaming_exactly_once.commit import committer, table_plan

            patch.setattr(committer, "plan_table_batch", lambda ask: table_plan.plan_table_batch(replace(ask, compaction=False)))
        assert run(sink, empty, tmp_path / "c2") is None  # batch 2: no row, its offsets recorded
    behind = read.iceberg_snapshot(str(table), as_of=1) == read.iceberg_snapshot(str(table), as_of=2) if fmt == "iceberg" else None
    assert behind is (True if earlier_release else False if fmt == "iceberg" else None)
    assert read.arrow(str(table), as_of=2).num_rows == len(first)
    code = main_exit(["verify", str(table)])
    assert code == 0, f"seo verify exit {code}"
    later = fill(src, "t", 1, 5, 2)
    sink = ExactlyOnceSink(str(table), **opts)
    assert run(sink, stream(kafka, src, starting=sink.starting_offsets()).withColumn("p", F.lit("x")), tmp_path / "c3") is None
    assert_once(table, first + later)
    if fmt == "delta":
        from deltalake import DeltaTable

        got = DeltaTable(str(table)).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    else:
        from pyiceberg.table import StaticTable

        got = StaticTable.from_metadata(str(table)).scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
    assert sorted(got) == sorted(first + later)


def main_exit(argv):
    try:
        main(argv)
        return 0
    except SystemExit as exc:
        return int(exc.code or 0)
