"""The state a program's actions leave behind, beyond the records (``world``) and the model:
the current configuration, the checkpoint, the query's changes, and what the explorer knows of
the table's schema and of the Kafka offsets its committed batches read."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.explorer.program import Setup

#: the ``query_id`` of every checkpoint of a program that sets it
FIXED_QUERY_ID = str(uuid.UUID(int=0xE5E5))
#: in-stream and ``seo compact`` compaction of a program: seconds, so short programs reach it
COMPACTION = {"min_files": 2, "min_age": "3s", "target_size": "1MB"}
#: the downstream query's ``maxFileAge`` (below ``min_age``: the documented condition)
DOWNSTREAM_MAX_FILE_AGE = "1s"
#: options a table fixes at its creation: a restart with another value must be refused
FIXED_OPTIONS = ("format", "partitioned", "compact_interval", "private_manifest")
#: the ones a dataset group's member tables fix, when the first of them is created (its root
#: holds neither: a group whose first batch brought no row has no member yet)
MEMBER_OPTIONS = ("format", "partitioned")


@dataclass
class QueryState:
    checkpoint: int = 0
    #: the current checkpoint has not run a query yet
    fresh: bool = True
    #: where a fresh checkpoint's Kafka-like source starts: earliest, latest, table
    start: str = "earliest"
    rate_gen: int = 0
    extra_columns: int = 0
    widen: bool = False
    drop_offsets: bool = False
    allow_offset_gaps: bool = False
    fail_on_data_loss: bool = False
    #: a group's gate is on (the user lifts it after a batch it rejected)
    gate: bool = False
    #: the sink's ``record_columns=["id"]`` (after an ``OffsetResetError``)
    record_columns: bool = False
    #: the sink's ``adopt_existing_files=True`` (after an ``ExistingFilesError``)
    adopt: bool = False


@dataclass
class TableState:
    #: the configuration the table was created with (None: no table yet)
    created: Setup | None = None
    #: a dataset group's member tables exist: ``MEMBER_OPTIONS`` of ``created`` are theirs
    members: bool = False
    #: the columns of its schema (None: no batch yet), and whether ``v`` was widened
    columns: frozenset[str] | None = None
    widened: bool = False


@dataclass
class KafkaMarks:
    """Per ``topic/partition``: ``lo`` - offsets below it were surely read by committed batches;
    ``hi`` - no committed batch read at or beyond it. The table's high-water mark lies between."""

    lo: dict[str, int] = field(default_factory=dict)
    hi: dict[str, int] = field(default_factory=dict)

    def settle(self, ends: dict[str, int]) -> None:
        for tp, end in ends.items():
            self.lo[tp] = max(self.lo.get(tp, 0), end)
            self.hi[tp] = max(self.hi.get(tp, 0), end)

    def attempt(self, ends: dict[str, int]) -> None:
        for tp, end in ends.items():
            self.hi[tp] = max(self.hi.get(tp, 0), end)

    def seen(self, tp: str, offset: int) -> None:
        self.lo[tp] = max(self.lo.get(tp, 0), offset + 1)
        self.hi[tp] = max(self.hi.get(tp, 0), offset + 1)


def sink_options(setup: Setup, query: QueryState, downstream_checkpoint: Path | None) -> dict[str, Any]:
    """The sink's options (JSON values) for a program's current configuration."""
    opts: dict[str, Any] = {
        "format": setup.format,
        "partition_by": ["p"] if setup.partitioned else [],
        "staging_mode": setup.staging,
        "compact_interval": setup.compact_interval,
        "schema_evolution": setup.schema_evolution,
        "lease_timeout": "3s",
    }
    if setup.private_manifest:
        opts["spark_manifest"] = False
    if setup.query_id:
        opts["query_id"] = FIXED_QUERY_ID
    if setup.compaction:
        compaction: dict[str, Any] = dict(COMPACTION)
        if setup.downstream == "registered" and downstream_checkpoint is not None:
            compaction["consumers"] = {str(downstream_checkpoint): DOWNSTREAM_MAX_FILE_AGE}
        opts["compaction"] = compaction
    if setup.history:
        opts.update(min_batches_to_retain=setup.history, cleanup_delay="0s")
    if query.allow_offset_gaps:
        opts["allow_offset_gaps"] = True
    if query.record_columns:
        opts["record_columns"] = ["id"]
    if query.adopt:
        opts["adopt_existing_files"] = True
    return opts


def query_columns(setup: Setup, query: QueryState) -> frozenset[str]:
    cols = {"id", "p", "v"}
    if "kafka" in setup.sources and not query.drop_offsets:
        cols |= {"topic", "partition", "offset"}
    cols |= {f"c{i + 1}" for i in range(query.extra_columns)}
    return frozenset(cols)
