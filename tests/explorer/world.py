"""The explorer's world: the sources a program's records go to, and every record produced.

Each record has a unique id, a partition value ``p`` and an int ``v``; the query carries them as
columns ``id``, ``p``, ``v`` whatever the source:

* **files** - JSON-lines files in ``input/`` (the file source reads them with a fixed schema);
* **kafka** - the Kafka stand-in (``streaming_exactly_once.testing.fake_kafka``) under ``kafka/``: a record's value
  is ``id:p:v``; topics ``a`` and ``b`` (``b`` appears when first produced to), partitions that
  grow, topics deleted and recreated (offsets restart at 0: a new *incarnation*), records
  expired below an offset;
* **rate** - ``rate-micro-batch``: the query itself makes its records (``r<gen>-<value>``, one
  generation per checkpoint), so they are learnt from the checkpoint after each run
  (``rate_records``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from streaming_exactly_once.testing import fake_kafka

TOPICS = ("a", "b")
#: the query's filter (``Setup.filter``), in Spark SQL and in Python
FILTER_SQL = "v % 5 <> 0"


def passes_filter(v: int | None) -> bool:
    return v is not None and v % 5 != 0


@dataclass(frozen=True)
class Record:
    id: str
    source: str  # files | kafka | rate | foreign
    p: str
    v: int
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None


class World:
    """The directories of one program run, and every record its sources were given."""

    def __init__(self, work: Path, rng: random.Random) -> None:
        self.work = work
        self.rng = rng
        self.input = work / "input"
        self.kafka = work / "kafka"
        self.table = work / "table"
        self.input.mkdir(parents=True, exist_ok=True)
        self.kafka.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, Record] = {}
        self._files = 0
        self._serial = 0
        #: topic -> number of partitions, and its incarnation (recreations so far)
        self.partitions: dict[str, int] = {"a": 2}
        self.incarnation: dict[str, int] = {"a": 0}

    def _values(self, n: int, special: list[int] | None = None) -> list[tuple[str, int]]:
        """``n`` (p, v) pairs; ``special`` gives the first rows their ``v`` (a group's bad or
        poison records)."""
        out = [(str(self.rng.randrange(3)), self.rng.randrange(1000)) for _ in range(n)]
        for i, v in enumerate((special or [])[:n]):
            out[i] = (out[i][0], v)
        return out

    def write_file(self, rows: int, special: list[int] | None = None) -> list[Record]:
        """One new input file of ``rows`` records (written to a hidden name, then renamed, as a
        landing process should, so the file source never lists it half written)."""
        name = f"in-{self._files:04d}.json"
        self._files += 1
        out = [Record(f"f{self._files - 1}-{i}", "files", p, v) for i, (p, v) in enumerate(self._values(rows, special))]
        tmp = self.input / f".{name}.tmp"
        tmp.write_text("".join(json.dumps({"id": r.id, "p": r.p, "v": r.v}) + "\n" for r in out))
        os.replace(tmp, self.input / name)
        self._add(out)
        return out

    def produce(self, topic: str, partition: int, n: int, special: list[int] | None = None) -> list[Record]:
        """``n`` records appended to a partition of a topic (created if new)."""
        self.partitions[topic] = max(self.partitions.get(topic, 0), partition + 1)
        self.incarnation.setdefault(topic, 0)
        start = self.end_offset(topic, partition)
        out = []
        for i, (p, v) in enumerate(self._values(n, special)):
            self._serial += 1
            out.append(Record(f"k{self._serial}", "kafka", p, v, topic, partition, start + i))
        fake_kafka.produce(self.kafka, topic, partition, [f"{r.id}:{r.p}:{r.v}" for r in out])
        self._add(out)
        return out

    def end_offset(self, topic: str, partition: int) -> int:
        path = self.kafka / topic / str(partition)
        return path.read_text().count("\n") if path.exists() else 0

    def earliest_offset(self, topic: str, partition: int) -> int:
        path = self.kafka / topic / f"{partition}.earliest"
        return int(path.read_text()) if path.exists() else 0

    def expire(self, topic: str, partition: int, below: int) -> list[Record]:
        """Retention: the partition's records below ``below`` are gone; returns them."""
        fake_kafka.expire(self.kafka, topic, partition, below)
        return [r for r in self.kafka_records(topic, partition) if r.offset is not None and r.offset < below]

    def recreate_topic(self, topic: str) -> None:
        """The topic is deleted and created again, empty: offsets restart at 0."""
        shutil.rmtree(self.kafka / topic, ignore_errors=True)
        self.incarnation[topic] = self.incarnation.get(topic, 0) + 1
        self.partitions[topic] = 1

    def kafka_records(self, topic: str, partition: int) -> list[Record]:
        """The records of the partition's current incarnation (what its file holds)."""
        path = self.kafka / topic / str(partition)
        if not path.exists():
            return []
        ids = [line.split(":", 1)[0] for line in path.read_text().splitlines()]
        return [self.records[i] for i in ids]

    def add_rate(self, gen: int, values: range) -> None:
        """Records the rate source made in checkpoint generation ``gen`` (learnt from its offsets)."""
        self._add([Record(f"r{gen}-{v}", "rate", str(v % 3), v % 1000) for v in values])

    def add_foreign(self, rows: int) -> list[Record]:
        out = [Record(f"x{i}", "foreign", p, v) for i, (p, v) in enumerate(self._values(rows))]
        self._add(out)
        return out

    def _add(self, records: list[Record]) -> None:
        for r in records:
            self.records[r.id] = r
