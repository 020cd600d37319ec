"""``<checkpoint>/metadata``: the persistent id of a streaming query.

Bytes (no version header, no trailing newline)::

    {"id":"c578917c-43fe-4830-b2ab-4ce71a4c834d"}

Spark writes it once, when a query first runs with an empty checkpoint, and reads it on
every restart; a new checkpoint therefore means a new id. The sink keys its idempotence on
(this id, batch id), which is what lets it tell a replayed batch from a recreated checkpoint.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ..errors import LogCorruptError
from ..log.version import loads_line

HINT = (
    "This file is Spark's, not ours: if the checkpoint is damaged, restore it from a backup or "
    "start the query on a new checkpoint location (the sink then treats it as a new query and "
    "skips input files it has already committed)."
)


@dataclass(frozen=True)
class QueryMetadata:
    id: str


def parse_query_metadata(data: bytes, *, path: str) -> QueryMetadata:
    def corrupt(problem: str) -> LogCorruptError:
        return LogCorruptError(path=path, batch_id=None, problem=problem, hint=HINT)

    if not data.strip():
        raise corrupt("the file is empty")
    try:
        obj = loads_line(data.decode("utf-8").splitlines()[0])
    except (UnicodeDecodeError, ValueError, IndexError):
        raise corrupt("not a JSON object") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise corrupt("missing the string field 'id'")
    try:
        uuid.UUID(obj["id"])
    except ValueError:
        raise corrupt(f"'id' is not a UUID: {obj['id']!r:.50}") from None
    return QueryMetadata(id=obj["id"])
