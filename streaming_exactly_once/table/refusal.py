"""``_seo/refused``: the last batch the sink refused, and why - what ``seo status`` shows and what a
Spark Connect client raises for a failed query (the batch ran in the server, its error is not
in the client's process).

Written only when a batch is refused (a library error raised inside it), never on a batch that
commits; each refusal replaces the previous one. Nothing reads it to decide anything: deleting
it loses only the note. Bytes (the second line shown wrapped)::

    v1
    {"queryId":"c578917c-...","sparkBatchId":4,"timeMs":1795313165300,"error":"OffsetGapError",
      "message":"Batch 4 of query c578917c-... starts after ...","attrs":{"batch_id":4,"table":"..."},
      "host":"vm-3","pid":687}

``error`` is the class name in ``streaming_exactly_once.errors``; ``attrs`` its attributes that
JSON holds (the others as their text); ``queryId`` null when the batch failed before its query
was known.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from .. import errors
from ..errors import ExactlyOnceError
from ..log.codec import RecordError
from ..log.record_file import encode_record, read_record
from ..storage.base import Storage
from .layout import SEO_DIR

REFUSED_FILE = f"{SEO_DIR}/refused"
VERSION = 1
HINT = "The refusal record is only a note of the last refused batch; it is safe to delete."


@dataclass(frozen=True)
class Refusal:
    """The record of one refused batch."""

    query_id: str | None
    spark_batch_id: int
    time_ms: int
    error: str
    message: str
    attrs: dict[str, Any] = field(default_factory=dict)
    host: str = ""
    pid: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "queryId": self.query_id,
            "sparkBatchId": self.spark_batch_id,
            "timeMs": self.time_ms,
            "error": self.error,
            "message": self.message,
            "attrs": self.attrs,
            "host": self.host,
            "pid": self.pid,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Refusal:
        try:
            return cls._from_json(obj)
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordError(f"not a refusal record: {exc!r}") from None

    @classmethod
    def _from_json(cls, obj: dict[str, Any]) -> Refusal:
        return cls(
            query_id=obj.get("queryId"),
            spark_batch_id=int(obj["sparkBatchId"]),
            time_ms=int(obj["timeMs"]),
            error=str(obj["error"]),
            message=str(obj["message"]),
            attrs=dict(obj.get("attrs") or {}),
            host=str(obj.get("host", "")),
            pid=int(obj.get("pid", 0)),
        )

    def rebuilt(self) -> ExactlyOnceError:
        """The error as the batch raised it: its class (``ExactlyOnceError`` for a name this
        release does not know), message and attributes."""
        cls = getattr(errors, self.error, None)
        if not (isinstance(cls, type) and issubclass(cls, ExactlyOnceError)):
            cls = ExactlyOnceError
        err = cls.__new__(cls)
        ExactlyOnceError.__init__(err, self.message, **self.attrs)
        return err


def _json_attrs(error: ExactlyOnceError) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in getattr(error, "_attrs", {}).items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            value = str(value)
        out[key] = value
    return out


def write_refusal(storage: Storage, error: ExactlyOnceError, *, query_id: str | None, spark_batch_id: int) -> Refusal:
    """Replace the table's refusal record with ``error`` of batch ``spark_batch_id``."""
    refusal = Refusal(
        query_id=query_id,
        spark_batch_id=spark_batch_id,
        time_ms=int(time.time() * 1000),
        error=type(error).__name__,
        message=error.message,
        attrs=_json_attrs(error),
        host=socket.gethostname(),
        pid=os.getpid(),
    )
    storage.atomic_write(REFUSED_FILE, encode_record(refusal.to_json(), version=VERSION))
    return refusal


def read_refusal(storage: Storage) -> Refusal | None:
    """The table's last refused batch, or None if it never refused one."""
    return read_record(storage, REFUSED_FILE, Refusal.from_json, hint=HINT, version=VERSION)
