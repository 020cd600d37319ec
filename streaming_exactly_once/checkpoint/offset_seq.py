"""``<checkpoint>/offsets/N``: Spark's write-ahead record of what batch N reads.

Written before batch N runs; on restart Spark re-runs the last batch with exactly these
offsets. Format v1 (``spark.sql.streaming.offsetLog.formatVersion=1``, the default)::

    v1
    {"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{...}}
    {"logOffset":3}
    -

line 2 is the batch metadata; then one line per source, in source order: the source's own
offset JSON (a file source writes ``{"logOffset":N}``, legacy ``N``) or ``-`` for "no
offset yet". Format v2 (``offsetLog.formatVersion=2``, forced by Spark 4.x's source evolution)
prefixes each source line with ``<sourceId>:``, the key of the source's ``sources/<sourceId>/``
directory - its ordinal, or the name given with ``DataStreamReader.name`` - in no particular
order (Spark 4.3 wrote ``1:`` before ``0:``)::

    v2
    {"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{...}}
    1:{"logOffset":0}
    0:{"logOffset":0}

so a source's offset is looked up by its key (``OffsetSeq.by_source``), never by position.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import LogCorruptError
from ..log.batch_log import BatchLog
from ..log.codec import DictCodec
from ..log.version import loads_line, parse_version
from ..storage.base import Storage

MAX_VERSION = 2
VOID = "-"
HINT = (
    "This file is Spark's checkpoint, not ours: restore the checkpoint from a backup, or start the "
    "query on a new checkpoint location (the sink then skips input it has already committed)."
)


@dataclass(frozen=True)
class OffsetSeq:
    """Offsets of one batch: raw JSON text per source (None = no offset yet)."""

    version: int
    metadata: dict[str, Any]
    offsets: list[str | None]
    source_ids: list[str] = field(default_factory=list)

    def by_source(self) -> dict[str, str | None]:
        """Each source's offset by the key of its ``sources/<key>/`` directory: the ordinal in
        v1, the ``<sourceId>`` prefix in v2."""
        keys = self.source_ids if self.version >= 2 else [str(i) for i in range(len(self.offsets))]
        return dict(zip(keys, self.offsets, strict=True))

    @property
    def batch_watermark_ms(self) -> int | None:
        value = self.metadata.get("batchWatermarkMs")
        return value if isinstance(value, int) else None

    @property
    def batch_timestamp_ms(self) -> int | None:
        value = self.metadata.get("batchTimestampMs")
        return value if isinstance(value, int) else None


def file_source_log_offset(raw: str | None) -> int | None:
    """The ``logOffset`` of a file source offset ``{"logOffset":N}``, else None.

    Only the object form identifies a file source: a bare number is also what the rate source
    (``LongOffset``) writes, and other sources keep unrelated files under ``sources/<i>/``.
    """
    if raw is None:
        return None
    try:
        value = loads_line(raw)
    except ValueError:
        return None
    if isinstance(value, dict) and set(value) == {"logOffset"} and isinstance(value["logOffset"], int):
        return value["logOffset"]
    return None


def is_partition_offsets(raw: str | None) -> bool:
    """Whether ``raw`` is an offset shaped like Kafka's: ``{"topic":{"0":42,...},...}`` (topic ->
    partition -> next offset), at least one topic, every value a partition map of integers."""
    if raw is None:
        return False
    try:
        value = loads_line(raw)
    except ValueError:
        return False
    if not isinstance(value, dict) or not value:
        return False
    for partitions in value.values():
        if not isinstance(partitions, dict):
            return False
        if not all(isinstance(o, int) and not isinstance(o, bool) for o in partitions.values()):
            return False
    return True


class OffsetSeqLog(BatchLog[dict[str, Any]]):
    """Read-only view of ``<checkpoint>/offsets``."""

    def __init__(self, storage: Storage) -> None:
        super().__init__(storage, "offsets", DictCodec(), version=1, max_supported_version=MAX_VERSION, kind="checkpoint offsets", hint=HINT)

    def parse(self, data: bytes, batch_id: int) -> OffsetSeq:
        path = self.uri(batch_id)

        def corrupt(problem: str) -> LogCorruptError:
            return LogCorruptError(path=path, batch_id=batch_id, problem=problem, hint=HINT)

        if not data:
            raise corrupt("the file is empty")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise corrupt("not UTF-8 text") from None
        lines = text.split("\n")
        if len(lines) > 1 and lines[-1] == "":
            lines.pop()
        version = parse_version(lines[0], path=path, batch_id=batch_id, max_supported=MAX_VERSION, hint=HINT)
        metadata: dict[str, Any] = {}
        if len(lines) > 1:
            try:
                metadata = loads_line(lines[1])
            except ValueError:
                raise corrupt("line 2 (batch metadata) is not valid JSON") from None
            if not isinstance(metadata, dict):
                raise corrupt("line 2 (batch metadata) is not a JSON object")
        offsets: list[str | None] = []
        source_ids: list[str] = []
        for number, line in enumerate(lines[2:], start=3):
            if line == "":
                raise corrupt(f"line {number} is blank")
            if version >= 2:
                sid, sep, line = line.partition(":")
                if not sep or not sid or any(c in sid for c in '{}[]" \t'):
                    raise corrupt(f"line {number} has no '<sourceId>:' prefix")
                if sid in source_ids:
                    raise corrupt(f"line {number} repeats source {sid!r}")
                source_ids.append(sid)
            if line == VOID:
                offsets.append(None)
                continue
            try:
                loads_line(line)
            except ValueError:
                raise corrupt(f"line {number} is not a valid offset (JSON or '-')") from None
            offsets.append(line)
        return OffsetSeq(version=version, metadata=metadata, offsets=offsets, source_ids=source_ids)

    def offsets(self, batch_id: int) -> OffsetSeq | None:
        try:
            data = self.storage.read_bytes(self.path(batch_id))
        except FileNotFoundError:
            return None
        return self.parse(data, batch_id)
