"""What a lineage event says about one batch (or several, folded by the throttle).

Taken on the batch's thread from what the commit already returned - a handful of attribute
reads - and turned into OpenLineage objects on the sender's thread (``lineage_events``). The
batch's start offsets and its input datasets are worked out there too, from the query's
checkpoint and the batch's input files.
"""

from __future__ import annotations

import os
import posixpath
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote, urlsplit

from ..checkpoint.reader import InputFile
from ..commit.protocol.attempt import CommitResult
from ..table.group_state import GroupState
from ..table.source_offsets import source_partitions


def new_run_id() -> str:
    """A new run id: a UUID version 7 (time-ordered, what OpenLineage recommends), made here
    rather than by importing openlineage-python on the batch's thread."""
    ms = int(time.time() * 1000) & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms << 80) | (0x7 << 76) | (((rand >> 62) & 0xFFF) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


@dataclass(frozen=True)
class BatchFacts:
    """One committed batch - or, after ``fold``, a run of consecutive ones."""

    query_id: str
    first_spark_batch: int
    last_spark_batch: int
    first_table_batch: int | None
    last_table_batch: int | None
    committed_ms: int
    rows_written: int
    rows_duplicate: int
    rows_rejected: int
    files: int
    bytes: int
    #: ``manifestBatch`` (the _spark_metadata batch), ``delta`` (version), ``iceberg`` (snapshot id)
    versions: dict[str, int]
    schema: str | None
    checkpoint: str | None
    end_offsets: tuple[str | None, ...]
    input_files: tuple[InputFile, ...] = ()
    #: a dataset group's tables written by the batch: name -> {"batchId", "rows", "status"}
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    batches: int = 1

    @classmethod
    def of(
        cls,
        result: CommitResult,
        *,
        checkpoint: str | None,
        end_offsets: Sequence[str | None],
        input_files: Sequence[InputFile] | None,
        rows_rejected: int = 0,
    ) -> BatchFacts:
        record = result.record
        assert record is not None
        versions = {"manifestBatch": record.batch_id}
        if record.delta_version is not None:
            versions["delta"] = record.delta_version
        if record.iceberg_snapshot is not None:
            versions["iceberg"] = record.iceberg_snapshot
        members: dict[str, dict[str, Any]] = {}
        if record.datasets:
            for name, entry in GroupState.from_json(record.datasets).tables.items():
                if entry.last_group_batch == record.batch_id:
                    members[name] = {"batchId": entry.batch_id, "rows": entry.rows, "status": entry.status}
        return cls(
            query_id=result.query_id,
            first_spark_batch=result.spark_batch_id,
            last_spark_batch=result.spark_batch_id,
            first_table_batch=result.batch_id,
            last_table_batch=result.batch_id,
            committed_ms=record.commit_time_ms,
            rows_written=record.num_rows or 0,
            rows_duplicate=record.num_skipped_rows,
            rows_rejected=rows_rejected,
            files=record.num_files,
            bytes=record.num_bytes,
            versions=versions,
            schema=record.schema,
            checkpoint=checkpoint,
            end_offsets=tuple(end_offsets),
            input_files=tuple(input_files or ()),
            members=members,
        )

    def fold(self, later: BatchFacts) -> BatchFacts:
        """This run of batches followed by ``later``: counts added, the last one's versions,
        offsets and schema, the inputs of both."""
        members = dict(self.members)
        for name, entry in later.members.items():
            rows = (members.get(name, {}).get("rows") or 0) + (entry.get("rows") or 0)
            members[name] = {**entry, "rows": rows}
        return replace(
            later,
            first_spark_batch=self.first_spark_batch,
            first_table_batch=self.first_table_batch,
            rows_written=self.rows_written + later.rows_written,
            rows_duplicate=self.rows_duplicate + later.rows_duplicate,
            rows_rejected=self.rows_rejected + later.rows_rejected,
            files=self.files + later.files,
            bytes=self.bytes + later.bytes,
            input_files=self.input_files + later.input_files,
            members=members,
            batches=self.batches + later.batches,
        )

    def topics(self) -> list[str]:
        """The Kafka-shaped topics of the batch's sources (from their end offsets)."""
        return sorted({p.rsplit("/", 1)[0] for parts in source_partitions(list(self.end_offsets)).values() for p in parts})


def dataset_of(uri: str) -> tuple[str, str]:
    """OpenLineage's ``(namespace, name)`` of a location: ``("file", "/path")`` on local disk,
    ``("s3://bucket", "key")``, ``("gs://bucket", ...)``, ``("abfss://container@account...", ...)``."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    path = unquote(parts.path)
    if scheme in ("", "file", "hadoop+file"):
        return "file", path.rstrip("/") or "/"
    scheme = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}.get(scheme, scheme)
    return f"{scheme}://{parts.netloc}", path.strip("/")


def input_dirs(files: Sequence[InputFile]) -> list[tuple[str, str]]:
    """Per file source of the batch, the directory its files share, as a dataset."""
    by_source: dict[tuple[int, str], list[str]] = {}
    for f in files:
        namespace, name = dataset_of(f.path)
        by_source.setdefault((f.source, namespace), []).append(posixpath.dirname(name))
    out = []
    for (_, namespace), dirs in sorted(by_source.items()):
        common = posixpath.commonpath(dirs) if all(d.startswith("/") for d in dirs) or not any(d.startswith("/") for d in dirs) else dirs[0]
        out.append((namespace, common))
    return sorted(set(out))
