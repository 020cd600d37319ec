"""``_seo/rejected/<query id>-<Spark batch id>-<attempt>``: a batch the quality gates stopped.

Under the ``full`` commit policy a failed mandatory check publishes nothing and fails the batch;
this record is what is left to say why (the batch itself stays in the source, and Spark re-runs
it after the restart). Bytes (the second line shown wrapped)::

    v1
    {"queryId":"c578917c-...","sparkBatchId":4,"attempt":"9f2c41d0","timeMs":1795313165300,"policy":"full",
      "tables":{"orders":[{"name":"rows between 1 and 100","passed":false,"mandatory":true,"detail":"250 rows"}]}}
"""

from __future__ import annotations

from typing import Any

from ..log.record_file import encode_record, read_record
from ..storage.base import Storage
from .layout import SEO_DIR

REJECTED_DIR = f"{SEO_DIR}/rejected"
VERSION = 1
HINT = "A rejection record only documents a batch that was not published; it is safe to delete."


def write_rejection(storage: Storage, *, query_id: str, spark_batch_id: int, attempt: str, record: dict[str, Any]) -> str:
    path = f"{REJECTED_DIR}/{query_id}-{spark_batch_id}-{attempt}"
    storage.put_if_absent(path, encode_record({"queryId": query_id, "sparkBatchId": spark_batch_id, "attempt": attempt, **record}, version=VERSION))
    return path


def read_rejections(storage: Storage) -> list[dict[str, Any]]:
    out = []
    for info in storage.list_dir(REJECTED_DIR):
        record = read_record(storage, info.path, lambda obj: obj, hint=HINT, version=VERSION)
        if record is not None:
            out.append(record)
    return sorted(out, key=lambda r: r.get("timeMs", 0))
