"""``format="iceberg"`` tables through the commit layer, without Spark: the committer a sink
builds (``CommitterOptions.iceberg``), batches staged by hand as the sink stages them, and what
pyiceberg alone reads of the table by path."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
from streaming_exactly_once.delta.target import DeltaSettings
from streaming_exactly_once.iceberg.settings import IcebergSettings
from streaming_exactly_once.testing.faults import with_faults

Q = "aaaaaaaa-0000-0000-0000-00000000000a"


def iceberg_committer(storage, *, fail_at=None, delta: bool = False, keep: int | None = None, **opts: Any) -> TableCommitter:
    """The committer of a ``format="iceberg"`` table (``delta``: ``format=["delta", "iceberg"]``)."""
    options = CommitterOptions(
        heartbeat=False,
        partition_by=("p",),
        iceberg=IcebergSettings(snapshots_to_keep=keep),
        delta=DeltaSettings() if delta else None,
        **opts,
    )
    return TableCommitter(with_faults(storage, fail_at=fail_at) if fail_at else storage, options)


def ids_of(batch: int, rows: int = 4) -> list[int]:
    return list(range(batch * 100, batch * 100 + rows))


def pyiceberg_ids(table: Path, *, snapshot_id: int | None = None) -> Counter[int]:
    """Row ids as pyiceberg reads the table by path (its version hint) - nothing of ours."""
    from pyiceberg.table import StaticTable

    static = StaticTable.from_metadata(str(table))
    return Counter(static.scan(snapshot_id=snapshot_id).to_arrow().column("id").to_pylist())


def current_metadata(table: Path) -> dict[str, Any]:
    """The metadata file ``version-hint.text`` names, parsed with json."""
    version = int((table / "metadata" / "version-hint.text").read_text())
    return json.loads((table / "metadata" / f"v{version}.metadata.json").read_text())


def snapshots_by_batch(table: Path) -> dict[int, int]:
    """{manifest batch: snapshot id} of the current metadata's snapshots (each batch once)."""
    out: dict[int, int] = {}
    for snap in current_metadata(table)["snapshots"]:
        batch = int(snap["summary"]["seo.batch-id"])
        assert batch not in out, f"batch {batch} is in two snapshots"
        out[batch] = snap["snapshot-id"]
    return out
