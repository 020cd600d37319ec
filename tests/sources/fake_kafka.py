"""The Kafka stand-in source under its former test-tree name: it ships in the library now
(``streaming_exactly_once.testing.fake_kafka``); scripts written against this path still run."""

from streaming_exactly_once.testing.fake_kafka import FakeKafka, expire, produce

__all__ = ["FakeKafka", "expire", "produce"]
