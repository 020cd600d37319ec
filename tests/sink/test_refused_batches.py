"""A batch the library refuses surfaces as the library's error: the query ``sink.start`` returns
raises it from ``awaitTermination`` (and gives it from ``exception()``) with its own class,
message and attributes first - still a ``StreamingQueryException`` - and ``seo status`` shows
it from the table's refusal record. Real streaming queries over the Kafka stand-in."""

from __future__ import annotations

import json
import pickle
import re
import traceback

import pytest
from pyspark.errors import StreamingQueryException

from streaming_exactly_once import ExactlyOnceSink
from streaming_exactly_once.cli.main import main
from streaming_exactly_once.errors import ExactlyOnceError, OffsetGapError, SourceOffsetError
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.refusal import REFUSED_FILE, read_refusal, write_refusal
from streaming_exactly_once.testing.fake_kafka import FakeKafka, produce

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def kafka(spark):
    spark.dataSource.register(FakeKafka)
    return spark


def stream(spark, root, starting="earliest", extra=()):
    df = spark.readStream.format("fakekafka").option("path", str(root)).option("subscribe", "t").option("startingOffsets", starting).load()
    return df.selectExpr("CAST(value AS STRING) AS id", "topic", "partition", "offset", *extra)


def fill(root, start, n):
    produce(root, "t", 0, [f"r{i}" for i in range(start, start + n)])


def start(sink, df, checkpoint):
    return sink.start(df, checkpoint_location=str(checkpoint), trigger={"availableNow": True})


def test_a_refused_batch_raises_the_librarys_error_first(kafka, tmp_path, capsys):
    src, table = tmp_path / "kafka", tmp_path / "t"
    fill(src, 0, 10)
    first = ExactlyOnceSink(str(table))
    start(first, stream(kafka, src), tmp_path / "c1").awaitTermination()
    first.close()
    assert read_refusal(open_storage(str(table))) is None  # a committed batch records nothing
    fill(src, 10, 5)  # arrive while no query runs; the checkpoint is lost, the query restarts from latest
    sink = ExactlyOnceSink(str(table))
    query = start(sink, stream(kafka, src, "latest"), tmp_path / "c2")
    with pytest.raises(OffsetGapError) as raised:
        query.awaitTermination()
    sink.close()
    err = raised.value
    # the library's error, and Spark's: an existing `except StreamingQueryException` still catches it
    assert isinstance(err, StreamingQueryException) and isinstance(err, SourceOffsetError)
    assert str(err).startswith(f"Batch 0 of query {query.id} ") and "t/0 [10, 15)" in str(err)
    assert err.partitions and err.batch_id == 0  # its attributes, as raised
    assert err.getCondition() == "STREAM_FAILED"  # Spark's methods still answer
    last = traceback.format_exception_only(err)[-1]
    assert last.startswith("streaming_exactly_once.errors.OffsetGapError: Batch 0 of query"), last
    shown = "".join(traceback.format_exception(err))
    assert "py4j" not in shown and "Python Proxy" not in shown  # Spark's wrapping
    assert shown.count('File "') < 12 and "offset_guard.py" in shown  # from the sink's frames to where it raised
    assert sink.last_error is not None and sink.last_error.message == err.message and type(sink.last_error) is OffsetGapError
    again = query.exception()
    assert isinstance(again, OffsetGapError) and isinstance(again, StreamingQueryException)
    plain = pickle.loads(pickle.dumps(err))
    assert type(plain) is OffsetGapError and plain.message == err.message and plain.partitions == err.partitions

    refusal = read_refusal(open_storage(str(table)))
    assert refusal is not None and refusal.error == "OffsetGapError" and refusal.query_id == str(query.id) and refusal.spark_batch_id == 0
    capsys.readouterr()
    assert main(["status", str(table), "--json"]) in (0, None)
    shown = json.loads(capsys.readouterr().out)["lastRefusal"]
    assert shown["error"] == "OffsetGapError" and shown["message"] == err.message and shown["committedSince"] is False
    main(["status", str(table)])
    text = capsys.readouterr().out
    assert re.search(rf"last refusal +OffsetGapError in batch 0 of query {query.id}, .* \(nothing committed since\)", text), text
    assert "  Batch 0 of query" in text  # the whole message, under the block


def test_another_failure_is_raised_as_spark_raised_it(spark, tmp_path):
    """A failure the library did not raise - here the query's own expression - is Spark's error,
    even when the table holds an earlier refusal of the same query."""
    landing, table = tmp_path / "in", tmp_path / "t"
    landing.mkdir()
    (landing / "a.csv").write_text("0\n1\n")
    df = spark.readStream.schema("id LONG").csv(str(landing)).selectExpr("id", "CASE WHEN id >= 1 THEN raise_error('boom') END AS x")
    sink = ExactlyOnceSink(str(table))
    query = start(sink, df, tmp_path / "c")
    write_refusal(open_storage(str(table)), OffsetGapError("Batch 0 of query earlier"), query_id=str(query.id), spark_batch_id=0)
    with pytest.raises(StreamingQueryException) as raised:
        query.awaitTermination()
    sink.close()
    assert not isinstance(raised.value, ExactlyOnceError) and "boom" in str(raised.value)
    assert not isinstance(query.exception(), ExactlyOnceError)
    assert sink.last_error is None
    assert (table / REFUSED_FILE).read_text().startswith("v1\n")
