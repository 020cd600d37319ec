"""What the format contract suite needs of a table format, one class per format (fsspec's
shared-fixtures style: the suite asks, each format answers from its own readers).

Every answer is read with the format's own reader and nothing of ours - delta-rs for Delta,
pyiceberg by path for Iceberg - so the suite proves what that format's readers see."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
from streaming_exactly_once.commit.table_steps.format_step import CommitDelta, CommitFormat, CommitIceberg
from streaming_exactly_once.delta.files import DeltaFile
from streaming_exactly_once.delta.settings import DeltaSettings
from streaming_exactly_once.errors import DeltaTableError, ExactlyOnceError, IcebergTableError
from streaming_exactly_once.iceberg.files import IcebergFile
from streaming_exactly_once.iceberg.settings import IcebergSettings
from streaming_exactly_once.testing.faults import with_faults


class FormatUnderTest:
    """One table format as the contract suite drives and reads it."""

    name: str
    error: type[ExactlyOnceError]
    #: the WAL version an entry with this format's step is written as
    wal_version: int
    #: boundaries of this format's own step (``testing.faults``), beside the protocol's
    boundaries: tuple[str, ...]
    #: the commit record's key naming the format's commit of a batch
    record_key: str
    #: settings of a killed writer's program (``tests.commit.processes``)
    program: dict[str, Any]

    def committer(self, storage: Any, *, fail_at: str | None = None, **opts: Any) -> TableCommitter:
        options = CommitterOptions(heartbeat=False, partition_by=("p",), **self.options(), **opts)
        return TableCommitter(with_faults(storage, fail_at=fail_at) if fail_at else storage, options)

    def options(self) -> dict[str, Any]:
        raise NotImplementedError

    def ids(self, table: Path, *, batch: int | None = None) -> Counter[int]:
        """Row ids as the format's own reader reads the table (as of manifest batch ``batch``)."""
        raise NotImplementedError

    def commits(self, table: Path) -> dict[int, int]:
        """{manifest batch: the format's commit of it} - each batch in at most one commit."""
        raise NotImplementedError

    def columns(self, table: Path, *, batch: int) -> list[str]:
        """The table's columns as of manifest batch ``batch``, by the format's own metadata."""
        raise NotImplementedError

    def lose_newest_commit(self, table: Path) -> None:
        """Take the format's newest commit away, as a restore from an older backup would."""
        raise NotImplementedError

    def version_of(self, table: Path, batch: int) -> int:
        """The format's commit that is the table as of manifest batch ``batch``, by our reader."""
        from streaming_exactly_once import read

        return read.delta_version(str(table), as_of=batch) if self.name == "delta" else read.iceberg_snapshot(str(table), as_of=batch)

    def write_existing(self, table: Path, ids: list[int]) -> dict[str, Any]:
        """A table of this format written by its own library before the sink; the committer
        options that open it."""
        raise NotImplementedError

    def step(self, batch_id: int, app_id: str, files: list[tuple[str, int, int]], schema: str) -> CommitFormat:
        raise NotImplementedError


class DeltaUnderTest(FormatUnderTest):
    name, error, wal_version, record_key = "delta", DeltaTableError, 4, "deltaVersion"
    boundaries = ("after-delta",)
    program = {"delta": {"checkpoint_interval": 4}}

    def options(self) -> dict[str, Any]:
        return {"delta": DeltaSettings(checkpoint_interval=3)}

    def ids(self, table: Path, *, batch: int | None = None) -> Counter[int]:
        from tests.delta.readback import delta_ids

        return delta_ids(table, version=None if batch is None else self.commits(table)[batch])

    def commits(self, table: Path) -> dict[int, int]:
        from tests.delta.readback import batch_commits

        return batch_commits(table)

    def columns(self, table: Path, *, batch: int) -> list[str]:
        from deltalake import DeltaTable

        return [f.name for f in DeltaTable(str(table), version=self.commits(table)[batch]).schema().fields]

    def lose_newest_commit(self, table: Path) -> None:
        newest = max(self.commits(table).values())
        os.remove(table / "_delta_log" / f"{newest:020d}.json")

    def write_existing(self, table: Path, ids: list[int]) -> dict[str, Any]:
        import pyarrow as pa
        from deltalake import write_deltalake

        half = len(ids) // 2
        write_deltalake(str(table), pa.table({"id": pa.array(ids[:half], pa.int64()), "p": ["a"] * half}), partition_by=["p"])
        rest = ids[half:]
        write_deltalake(str(table), pa.table({"id": pa.array(rest, pa.int64()), "p": ["b"] * len(rest)}), partition_by=["p"], mode="append")
        return {}

    def step(self, batch_id: int, app_id: str, files: list[tuple[str, int, int]], schema: str) -> CommitFormat:
        return CommitDelta(batch_id=batch_id, app_id=app_id, files=[DeltaFile(*f) for f in files], partition_by=("p",), schema=schema)


class IcebergUnderTest(FormatUnderTest):
    name, error, wal_version, record_key = "iceberg", IcebergTableError, 6, "icebergSnapshot"
    boundaries = ("before-iceberg", "before-iceberg-publish", "mid-iceberg", "after-iceberg")
    program = {"iceberg": {"snapshots_to_keep": 4}}

    def options(self) -> dict[str, Any]:
        return {"iceberg": IcebergSettings()}

    def ids(self, table: Path, *, batch: int | None = None) -> Counter[int]:
        from tests.iceberg.table_helpers import pyiceberg_ids

        return pyiceberg_ids(table, snapshot_id=None if batch is None else self.commits(table)[batch])

    def commits(self, table: Path) -> dict[int, int]:
        from tests.iceberg.table_helpers import current_metadata

        out: dict[int, int] = {}
        for snap in current_metadata(table)["snapshots"]:
            if "seo.batch-id" in snap["summary"]:  # not the snapshot of an adopted table's own writer
                batch = int(snap["summary"]["seo.batch-id"])
                assert batch not in out, f"batch {batch} is in two snapshots"
                out[batch] = snap["snapshot-id"]
        return out

    def columns(self, table: Path, *, batch: int) -> list[str]:
        from tests.iceberg.table_helpers import current_metadata

        meta = current_metadata(table)
        snap = next(s for s in meta["snapshots"] if s["snapshot-id"] == self.commits(table)[batch])
        schema = next(s for s in meta["schemas"] if s["schema-id"] == snap["schema-id"])
        return [f["name"] for f in schema["fields"]]

    def lose_newest_commit(self, table: Path) -> None:
        hint = table / "metadata" / "version-hint.text"
        newest = int(hint.read_text())
        os.remove(table / "metadata" / f"v{newest}.metadata.json")
        hint.write_text(str(newest - 1))

    def write_existing(self, table: Path, ids: list[int]) -> dict[str, Any]:
        """Through pyiceberg's own path-based catalog, its files where Spark lays partitions out
        (``write.data.path``: the table's location)."""
        import pyarrow as pa
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.transforms import IdentityTransform
        from pyiceberg.types import LongType, NestedField, StringType

        from streaming_exactly_once.storage import open_storage
        from tests.iceberg.helpers import target

        catalog = target(open_storage(str(table))).catalog()
        schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "p", StringType()))
        spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
        properties = {"write.data.path": str(table)}
        txn = catalog.create_table_transaction(catalog.identifier, schema, location=str(table), partition_spec=spec, properties=properties)
        txn.append(pa.table({"id": pa.array(ids, pa.int64()), "p": ["a"] * len(ids)}))
        txn.commit_transaction()
        return {}

    def step(self, batch_id: int, app_id: str, files: list[tuple[str, int, int]], schema: str) -> CommitFormat:
        return CommitIceberg(batch_id=batch_id, app_id=app_id, files=[IcebergFile(*f) for f in files], partition_by=("p",), schema=schema)


FORMATS = [DeltaUnderTest(), IcebergUnderTest()]


def app_id_of(table: Path, name: str) -> str:
    identity = json.loads((table / "_seo" / "table").read_text().splitlines()[1])
    return str(identity["delta"]["appId"] if name == "delta" else identity["iceberg"]["appId"])
