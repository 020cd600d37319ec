"""``_seo/schema/M``: the table's schema, one file per change, ``M`` the first batch that has it.

Bytes (one record; ``schema`` is the Spark schema JSON as a string, as commit records and
Delta's ``schemaString`` hold it)::

    v1
    {"batchId":0,"reason":"create","partitionBy":["day"],"schema":"{\\"type\\":\\"struct\\",\\"fields\\":[{\\"name\\":\\"id\\",\\"type\\":\\"long\\",\\"nullable\\":true,\\"metadata\\":{}},...]}"}

and after an evolving batch::

    v1
    {"batchId":7,"reason":"evolve","partitionBy":["day"],"schema":"{...}","changes":["added column 'extra' (string)"]}

``reason`` is ``create`` (the table's first batch), ``evolve`` (the batch added columns or
widened types, listed in ``changes``) or ``adopt`` (the table had batches before any schema
record - written before this release, or by Spark's own sink - and a writer took the schema
of its newest commit record, or of its next batch).

The schema of batch ``N`` is the record with the largest ``M <= N``. A record is written by the
commit step ``schema`` (``commit.table_steps.schema_step``) of its batch, before the batch's manifest entry:
whoever sees the batch finds its schema. A record above the manifest's latest batch belongs to a
claim that was discarded (``seo recover --discard-wal``); readers never look above the batch they
read, and the next writer deletes it when it opens the table (``forget_after``). Records are
kept for the life of the table (one small file per change): an old batch read with ``as_of``
needs the record that was current for it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field as dc_field

from ..errors import LogCorruptError
from ..log.record_fields import decode, encode, json_field, one_of, strings
from ..log.record_file import encode_record, read_record
from ..storage.base import Storage
from .layout import SEO_DIR

log = logging.getLogger("streaming_exactly_once.table")

SCHEMA_DIR = f"{SEO_DIR}/schema"
VERSION = 1
HINT = (
    "A table schema record says which columns and types the table's batches from this one on have. "
    "Restore it from a backup; or delete it and let the next writer adopt the schema of the newest "
    "commit record (`seo status` shows the schema history)."
)
REASONS = ("create", "evolve", "adopt")


@dataclass(frozen=True)
class SchemaRecord:
    """One ``_seo/schema/M`` record (module docstring)."""

    batch_id: int = dc_field(metadata=json_field("batchId", int))
    reason: str = dc_field(metadata=json_field("reason", str, check=one_of(*REASONS)))
    partition_by: tuple[str, ...] = dc_field(default=(), metadata=json_field("partitionBy", list, check=strings))
    schema: str = dc_field(default="", metadata=json_field("schema", str))
    changes: tuple[str, ...] = dc_field(default=(), metadata=json_field("changes", list, optional=True, omit_default=True, check=strings))

    def to_bytes(self) -> bytes:
        return encode_record(encode(self), version=VERSION)


def schema_path(batch_id: int) -> str:
    return f"{SCHEMA_DIR}/{batch_id}"


def schema_batches(storage: Storage) -> list[int]:
    """The batch ids that have a schema record, ascending (temp files of a write are skipped)."""
    return sorted(int(e.name) for e in storage.list_dir(SCHEMA_DIR) if e.name.isdigit() and not e.is_dir)


def read_schema(storage: Storage, batch_id: int) -> SchemaRecord | None:
    """Record ``batch_id``; None if absent; ``LogCorruptError`` naming the file if unreadable."""
    found = read_record(storage, schema_path(batch_id), lambda obj: decode(SchemaRecord, obj), hint=HINT, version=VERSION)
    if found is not None and found.batch_id != batch_id:
        raise LogCorruptError(
            path=storage.uri(schema_path(batch_id)), batch_id=batch_id, problem=f"the record says batch {found.batch_id}", hint=HINT
        )
    return found


def schema_as_of(storage: Storage, batch_id: int) -> SchemaRecord | None:
    """The schema of batch ``batch_id``: the newest record at or below it (None: no record)."""
    older = [b for b in schema_batches(storage) if b <= batch_id]
    return read_schema(storage, older[-1]) if older else None


def schema_history(storage: Storage, up_to: int | None = None) -> list[SchemaRecord]:
    """Every record (at or below ``up_to``), oldest first."""
    out = []
    for batch_id in schema_batches(storage):
        if up_to is None or batch_id <= up_to:
            record = read_schema(storage, batch_id)
            if record is not None:
                out.append(record)
    return out


def forget_after(storage: Storage, latest: int) -> list[int]:
    """Delete the records above batch ``latest`` (of claims that never published); their ids."""
    stray = [b for b in schema_batches(storage) if b > latest]
    for batch_id in stray:
        log.warning("deleting %s: its batch %d was never published", storage.uri(schema_path(batch_id)), batch_id)
        storage.delete(schema_path(batch_id))
    return stray


__all__ = ["SCHEMA_DIR", "SchemaRecord", "forget_after", "read_schema", "schema_as_of", "schema_batches", "schema_history", "schema_path"]
