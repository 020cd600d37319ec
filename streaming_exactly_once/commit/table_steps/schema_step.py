"""The ``schema`` commit step: a batch that changes its table's schema writes ``_seo/schema/M``.

It runs right before the ``manifest`` step (a group's: before ``members``), so a reader that
sees batch ``M`` finds the schema ``M`` was written with; a crash before the manifest leaves a
record above the latest batch, which no reader consults and which the claim's roll-forward
finds done (or the next writer deletes, if the claim is discarded). Only batches that change
the schema have the step: the first batch, an evolving one (``table.schema_log``).

* ``verify``: the record exists with exactly these bytes (other bytes: another writer's batch
  ``M`` - a conflict, never overwritten);
* ``execute``: create-if-absent.

Bytes in the WAL (``commit.protocol.sequence``, one line; ``table`` only for a dataset group's table, its
path under the group root)::

    {"kind":"schema","record":{"batchId":7,"reason":"evolve","partitionBy":["day"],"schema":"{...}","changes":[...]},"table":"orders"}
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field

from ...errors import LogConflictError
from ...log.codec import RecordError
from ...log.record_fields import json_field
from ...storage.base import Storage, check_relative
from ...table.schema_log import SchemaRecord, schema_path
from ..protocol.step import CommitStep, StepContext, register


def _inside(path: str, name: str) -> str:
    try:
        return check_relative(path)
    except ValueError:
        raise RecordError(f"field '{name}' names {path[:60]!r}, which is not a path inside the group") from None


@register
@dataclass
class WriteSchema(CommitStep):
    """Publish the table schema that batch ``record.batch_id`` introduces (module docstring)."""

    kind = "schema"
    record: SchemaRecord = dc_field(metadata=json_field("record", dict, record=SchemaRecord))
    table: str | None = dc_field(default=None, metadata=json_field("table", str, optional=True, omit_default=True, check=_inside))

    def _storage(self, ctx: StepContext) -> Storage:
        return ctx.storage if self.table is None else ctx.storage.child(self.table)

    def verify(self, ctx: StepContext) -> bool:
        storage = self._storage(ctx)
        path = schema_path(self.record.batch_id)
        try:
            found = storage.read_bytes(path)
        except FileNotFoundError:
            return False
        if found != self.record.to_bytes():
            raise LogConflictError(
                path=storage.uri(path),
                batch_id=self.record.batch_id,
                hint="Another writer recorded another schema for this batch. Stop every other writer of this table "
                "and run `seo verify`; if the batch is not in the manifest, delete the file and restart.",
            )
        return True

    def execute(self, ctx: StepContext) -> None:
        try:
            self._storage(ctx).put_if_absent(schema_path(self.record.batch_id), self.record.to_bytes())
        except FileExistsError:
            self.verify(ctx)  # a concurrent roll-forward wrote it first: the same bytes, or a conflict

    def written(self, ctx: StepContext) -> list[tuple[Storage, str]]:
        return [(self._storage(ctx), schema_path(self.record.batch_id))]
