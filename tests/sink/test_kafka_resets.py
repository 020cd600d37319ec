"""A topic deleted and recreated numbers its records from 0 again: new records at offsets the table
holds older ones at. Real streaming queries over the stand-in source (``streaming_exactly_once.testing.fake_kafka``),
every record counted in the table (``sink.offset_guard``, ``sink.record_probe``)."""

from __future__ import annotations

import json
import shutil

import pytest

from streaming_exactly_once import DatasetSink, ExactlyOnceSink
from streaming_exactly_once.errors import OffsetResetError
from streaming_exactly_once.testing.fake_kafka import FakeKafka, produce
from tests.sink.test_kafka_offsets import assert_once, fill, records, run, stream

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def kafka(spark):
    spark.dataSource.register(FakeKafka)
    return spark


def recreate(src, topic, values):
    shutil.rmtree(src / topic)  # kafka-topics --delete; --create; the producers write from offset 0 again
    produce(src, topic, 0, values)


def test_a_recreated_topic_read_by_a_new_checkpoint_is_written_and_its_offsets_restart(kafka, tmp_path):
    src, table = tmp_path / "kafka", tmp_path / "t"
    old = fill(src, "t", 1, 0, 8)
    other = fill(src, "u", 1, 0, 3)  # a topic that was not recreated: still dropped as re-read
    both = lambda: stream(kafka, src, "t,u")  # noqa: E731
    assert run(ExactlyOnceSink(str(table)), both(), tmp_path / "c1") is None
    new = [f"new-{i}" for i in range(5)]
    recreate(src, "t", new)
    sink = ExactlyOnceSink(str(table))
    assert run(sink, both(), tmp_path / "c2") is None
    assert_once(table, old + other + new)
    assert sink.counters["skipped_rows"] == 3  # u's records, held already
    assert json.loads(sink.starting_offsets()) == {"t": {"0": 5}, "u": {"0": 3}}
    # the next lost checkpoint drops the new records, and only them
    more = ["new-5", "new-6"]
    produce(src, "t", 0, more)
    again = ExactlyOnceSink(str(table))
    assert run(again, both(), tmp_path / "c3") is None
    assert_once(table, old + other + new + more)
    assert again.counters["skipped_rows"] == 8


def test_the_same_checkpoint_reading_a_recreated_topic_writes_its_records(kafka, tmp_path):
    """failOnDataLoss=false: Spark's source skips what it cannot read and goes on from the new
    topic's offsets, below the ones the query had reached. With the offsets log compacted every
    2 batches, the marks still restart (the reset is carried in the query's later records)."""
    src, table, checkpoint = tmp_path / "kafka", tmp_path / "t", tmp_path / "c"
    sink = lambda: ExactlyOnceSink(str(table), compact_interval=2)  # noqa: E731
    old = fill(src, "t", 1, 0, 20)
    assert run(sink(), stream(kafka, src, lose="false"), checkpoint) is None
    recreate(src, "t", [f"gone-{i}" for i in range(4)])  # 0..3: behind the query's 20, skipped by Spark's source
    assert run(sink(), stream(kafka, src, lose="false"), checkpoint) is None
    later = [f"later-{i}" for i in range(6)]  # 4..9: read by the same query
    produce(src, "t", 0, later)
    assert run(sink(), stream(kafka, src, lose="false"), checkpoint) is None
    produce(src, "t", 0, ["last"])
    assert run(sink(), stream(kafka, src, lose="false"), checkpoint) is None
    assert_once(table, old + later + ["last"])
    # a checkpoint lost now re-reads the new topic: what the table holds of it is dropped
    again = sink()
    assert run(again, stream(kafka, src, lose="false"), tmp_path / "c2") is None
    assert_once(table, old + later + ["last"])
    assert json.loads(again.starting_offsets()) == {"t": {"0": 11}}


def test_records_that_agree_with_the_tables_in_some_columns_only_are_refused_until_record_columns_say(kafka, tmp_path):
    """A column computed anew on each run makes a re-read record differ from the table's in that
    column only: the sink cannot tell it from a recreated topic's record, and says so."""
    src, table = tmp_path / "kafka", tmp_path / "t"
    first = fill(src, "t", 1, 0, 4)
    stamped = lambda: stream(kafka, src).selectExpr("*", "uuid() AS run")  # noqa: E731
    assert run(ExactlyOnceSink(str(table)), stamped(), tmp_path / "c1") is None
    error = run(ExactlyOnceSink(str(table)), stamped(), tmp_path / "c2")
    assert isinstance(error, OffsetResetError), error
    assert "t/0 at offset 3: 'run' differ(s), 'id' equal" in str(error) and "record_columns=" in str(error)
    assert_once(table, first)  # nothing of the refused batch
    sink = ExactlyOnceSink(str(table), record_columns=["id"])
    assert run(sink, stamped(), tmp_path / "c3") is None
    assert_once(table, first)
    assert sink.counters["skipped_rows"] == 4
    produce(src, "t", 0, records("t", 0, 4, 1))
    assert run(ExactlyOnceSink(str(table), record_columns=["id"]), stamped(), tmp_path / "c3") is None
    assert_once(table, first + records("t", 0, 4, 1))


@pytest.mark.parametrize("kind", ["table", "group"])
def test_a_partition_of_a_recreated_topic_added_back_later_is_written_by_the_same_query(kafka, tmp_path, kind):
    """The recreated topic has one partition where the old one had two; the second, added back
    later, is new to Spark's source (read from offset 0), though the query had read the old one up
    to 3: its records are new, not re-reads below the table's mark."""
    src, root, checkpoint = tmp_path / "kafka", tmp_path / "t", tmp_path / "c"
    sink = (lambda: ExactlyOnceSink(str(root))) if kind == "table" else (lambda: DatasetSink(str(root), dataset_column="topic"))
    table = root if kind == "table" else root / "t"
    old = fill(src, "t", 2, 0, 3)
    assert run(sink(), stream(kafka, src, lose="false"), checkpoint) is None
    recreate(src, "t", [f"gone-{i}" for i in range(3)])  # 0..2: not past the query's 3, skipped by Spark's source
    assert run(sink(), stream(kafka, src, lose="false"), checkpoint) is None
    added = ["added-0", "added-1"]
    produce(src, "t", 1, added)  # kafka-topics --alter --partitions 2
    assert run(sink(), stream(kafka, src, lose="false"), checkpoint) is None
    assert_once(table, old + added)
