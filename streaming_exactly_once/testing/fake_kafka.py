"""A streaming source that behaves like Spark's Kafka source where the sink can tell, without a
broker or the Kafka connector (Spark 4's Python data source API): try the Kafka path of a job -
a lost checkpoint, ``startingOffsets``, an offset gap - on a laptop (docs/kafka.md), as this
project's own tests do.

    from streaming_exactly_once.testing.fake_kafka import FakeKafka, produce
    spark.dataSource.register(FakeKafka)
    produce("/tmp/kafka", "events", 0, ["a", "b"])          # topic "events", partition 0
    df = spark.readStream.format("fakekafka").option("path", "/tmp/kafka").option("subscribe", "events").load()

Spark's Python workers import this module, so they need the library (``PYSPARK_PYTHON``, as
for the sink itself).

What it shares with Kafka's source: rows with ``key``, ``value``, ``topic``, ``partition`` and
``offset``; offsets in the checkpoint as ``{"topic": {"0": 42}}`` (the next offset to read per
partition); ``startingOffsets`` (``earliest``, ``latest`` or that JSON) applied only when a
query starts on an empty checkpoint; partitions that appear while a query runs (read from their
first record); records that expire (``expire``), which a query then skips silently with
``failOnDataLoss=false`` and fails on otherwise, and so are a planned range's records that are
gone (a deleted or recreated topic's partition, or fewer records than planned). What it lacks:
brokers, consumer groups, transaction markers (offsets here are dense), and the initial-offsets
file Kafka's source writes to ``<checkpoint>/sources/<i>/0`` - so for a checkpoint's first batch
the sink reads the start from the rows, as it does for any source that records none.

A topic is a directory under ``path``; a partition a file of one record per line; ``<p>.earliest``
holds the partition's first offset still retained.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

NAME = "fakekafka"


def produce(root: Path, topic: str, partition: int, values: list[str]) -> None:
    """Append records to a partition (created if new). A reader counts only lines ended by a
    newline, so records appear whole while a query reads the partition."""
    d = Path(root) / topic
    d.mkdir(parents=True, exist_ok=True)
    with open(d / str(partition), "a") as fh:
        fh.write("".join(v + "\n" for v in values))


def expire(root: Path, topic: str, partition: int, below: int) -> None:
    """Retention: records of the partition below offset ``below`` are gone."""
    (Path(root) / topic / f"{partition}.earliest").write_text(str(below))


def _partitions(root: str, topic: str) -> dict[str, tuple[int, int]]:
    """partition -> (earliest retained offset, end offset)."""
    d = os.path.join(root, topic)
    out: dict[str, tuple[int, int]] = {}
    if not os.path.isdir(d):
        return out
    for name in os.listdir(d):
        if not name.isdigit():
            continue
        with open(os.path.join(d, name)) as fh:
            end = fh.read().count("\n")  # complete records only: a producer may be mid-append
        earliest_file = os.path.join(d, f"{name}.earliest")
        earliest = int(open(earliest_file).read()) if os.path.exists(earliest_file) else 0
        out[name] = (earliest, end)
    return out


def _resolve(offset: int, bounds: tuple[int, int]) -> int:
    """A JSON start offset with Kafka's sentinels replaced: -2 earliest, -1 latest."""
    return bounds[0] if offset == -2 else bounds[1] if offset == -1 else offset


class _Range(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class _Reader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        options = {k.lower(): v for k, v in options.items()}  # Spark's options are case-insensitive
        self.root = options["path"]
        self.topics = [t for t in options.get("subscribe", "").split(",") if t]
        self.starting = options.get("startingoffsets", "latest")
        self.fail_on_data_loss = options.get("failondataloss", "true").lower() == "true"

    def _state(self) -> dict[str, dict[str, tuple[int, int]]]:
        return {t: _partitions(self.root, t) for t in self.topics}

    def initialOffset(self) -> dict[str, Any]:
        state = self._state()
        if self.starting == "earliest":
            return {t: {p: e for p, (e, _) in parts.items()} for t, parts in state.items()}
        if self.starting == "latest":
            return {t: {p: end for p, (_, end) in parts.items()} for t, parts in state.items()}
        given: dict[str, Any] = json.loads(self.starting)
        # Kafka's sentinels in a JSON start: -2 is the partition's earliest offset, -1 its latest
        return {t: {p: _resolve(o, state.get(t, {}).get(p, (0, 0))) for p, o in parts.items()} for t, parts in given.items()}

    # the signature of Spark 4.0-4.1 (4.2+ calls it too); Spark's newer one adds a read limit
    def latestOffset(self) -> dict[str, Any]:  # type: ignore[override]
        return {t: {p: end for p, (_, end) in parts.items()} for t, parts in self._state().items()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[_Range]:
        state = self._state()
        ranges = []
        for topic, parts in end.items():
            for p, stop in parts.items():
                begin = start.get(topic, {}).get(p, 0)  # a new partition: from its first record
                # a planned range whose records are gone - expired, or the topic was deleted or
                # recreated with fewer partitions or records - is data loss, as Kafka reports it
                earliest, now_end = state.get(topic, {}).get(p, (0, 0))
                if begin < earliest or stop > now_end:
                    if self.fail_on_data_loss:
                        raise RuntimeError(
                            f"offsets {begin}..{stop} of {topic}/{p} are gone: expired, or the topic was deleted or recreated (retained: "
                            f"{earliest}..{now_end}; failOnDataLoss=true)"
                        )
                    begin, stop = max(begin, earliest), min(stop, now_end)
                if stop > begin:
                    ranges.append(_Range(topic, int(p), begin, stop))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _Range)
        with open(os.path.join(self.root, partition.topic, str(partition.partition))) as fh:
            lines = fh.read().splitlines()
        for offset in range(partition.start, partition.end):
            yield (None, lines[offset].encode(), partition.topic, partition.partition, offset)

    def commit(self, end: dict[str, Any]) -> None:
        pass


class FakeKafka(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return "key binary, value binary, topic string, partition int, offset long"

    def streamReader(self, schema: Any) -> _Reader:
        return _Reader(dict(self.options))
