"""``<checkpoint>/commits/N``: Spark's record that batch N finished in the sink.

Bytes (v1)::

    v1
    {"nextBatchWatermarkMs":0}

Line 2 may be absent (read as ``{}``). v2 (``stateStore.checkpointFormatVersion=2``) adds
``stateUniqueIds``; v3 (Spark 4.x's sink evolution, ``queryEvolution.enableSinkEvolution``, a
sink named with ``DataStreamWriter.name``) adds each sink's state, measured on Spark 4.3::

    v3
    {"nextBatchWatermarkMs":0,"sinkMetadataMap":{"s1":{"sinkName":"s1","commitOffset":"-",
     "providerName":"...ForeachBatchSink","apiVersion":"DSv1","isActive":true}}}

(one line). A sink swapped into a checkpoint that way sees its first batch at the id after the
last one the earlier sink committed. ``offsets/N`` without ``commits/N`` means Spark will re-run
batch N.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import LogCorruptError
from ..log.batch_log import BatchLog
from ..log.codec import DictCodec
from ..log.version import loads_line, parse_version
from ..storage.base import Storage
from .offset_seq import HINT

MAX_VERSION = 3


@dataclass(frozen=True)
class CommitMarker:
    version: int
    metadata: dict[str, Any]

    @property
    def next_batch_watermark_ms(self) -> int | None:
        value = self.metadata.get("nextBatchWatermarkMs")
        return value if isinstance(value, int) else None


class CommitMarkerLog(BatchLog[dict[str, Any]]):
    """Read-only view of ``<checkpoint>/commits``."""

    def __init__(self, storage: Storage) -> None:
        super().__init__(storage, "commits", DictCodec(), version=1, max_supported_version=MAX_VERSION, kind="checkpoint commits", hint=HINT)

    def marker(self, batch_id: int) -> CommitMarker | None:
        path = self.uri(batch_id)
        try:
            data = self.storage.read_bytes(self.path(batch_id))
        except FileNotFoundError:
            return None
        if not data:
            raise LogCorruptError(path=path, batch_id=batch_id, problem="the file is empty", hint=HINT)
        try:
            lines = data.decode("utf-8").split("\n")
        except UnicodeDecodeError:
            raise LogCorruptError(path=path, batch_id=batch_id, problem="not UTF-8 text", hint=HINT) from None
        version = parse_version(lines[0], path=path, batch_id=batch_id, max_supported=MAX_VERSION, hint=HINT)
        metadata: dict[str, Any] = {}
        if len(lines) > 1 and lines[1].strip():
            try:
                metadata = loads_line(lines[1])
            except ValueError:
                raise LogCorruptError(path=path, batch_id=batch_id, problem="line 2 is not valid JSON", hint=HINT) from None
            if not isinstance(metadata, dict):
                raise LogCorruptError(path=path, batch_id=batch_id, problem="line 2 is not a JSON object", hint=HINT)
        return CommitMarker(version=version, metadata=metadata)
