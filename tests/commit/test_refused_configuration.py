"""A writer restarted with a configuration the table refuses changes nothing before it says so.

The table's identity fixes its manifest location (``spark_manifest``), its table formats (Delta,
Iceberg, both or none), its partitioning and its compact interval. A writer configured otherwise must fail with
``ConfigError`` - and, since a table is typically restarted right after a crash, with a
published batch's claim pending, it must not recover first through the wrong manifest: every
file stays byte for byte as it was (the lease's own files aside), and the correctly configured
writer then completes the batch and finds every row once.
"""

from __future__ import annotations

from collections import Counter

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.errors import ConfigError
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import InjectedFailure
from tests.commit.helpers import make_committer
from tests.delta.helpers import commit_batch, delta_committer
from tests.torture.matrix_checks import changes, snapshot

Q = "11111111-1111-1111-1111-111111111111"


def ids_of(batch: int) -> list[int]:
    return list(range(batch * 10, batch * 10 + 10))


def plain(storage, **kw):
    return make_committer(storage, **kw)


def delta_spark(storage, **kw):
    return delta_committer(storage, spark_manifest=True, **kw)


def delta_private(storage, **kw):
    return delta_committer(storage, spark_manifest=False, **kw)


def iceberg(storage, **kw):
    from tests.iceberg.table_helpers import iceberg_committer

    return iceberg_committer(storage, **kw)


def both(storage, **kw):
    from tests.iceberg.table_helpers import iceberg_committer

    return iceberg_committer(storage, delta=True, **kw)


def other_partitioning(made):
    """``made``'s configuration, partitioned by another column."""
    from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
    from streaming_exactly_once.delta.target import DeltaSettings

    delta = DeltaSettings() if made is not plain else None

    def restarted(storage):
        return TableCommitter(storage, CommitterOptions(heartbeat=False, partition_by=("q",), delta=delta, spark_manifest=made is not delta_private))

    return restarted


CASES = {
    "private manifest restarted with spark_manifest=True": (delta_private, delta_spark),
    "spark manifest restarted with spark_manifest=False": (delta_spark, delta_private),
    "plain table opened as a private-manifest Delta table": (plain, delta_private),
    "plain table opened as a Delta table": (plain, delta_spark),
    "Delta table opened without format=delta": (delta_spark, plain),
    "Delta table opened with another partitioning": (delta_spark, other_partitioning(delta_spark)),
    "plain table opened with another partitioning": (plain, other_partitioning(plain)),
    "plain table opened with another compact_interval": (plain, lambda storage: make_committer(storage, compact_interval=5)),
    "Iceberg table opened without format=iceberg": (iceberg, plain),
    "Iceberg table opened as a Delta table": (iceberg, delta_spark),
    "Iceberg table opened with Delta too": (iceberg, both),
    "Delta and Iceberg table opened as an Iceberg table": (both, iceberg),
    "plain table opened as an Iceberg table": (plain, iceberg),
}


@pytest.mark.parametrize("mode", ["direct", "rename"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_refused_configuration_changes_nothing_before_the_config_error(tmp_path, case, mode):
    made, restarted = CASES[case]
    storage = open_storage(str(tmp_path / "t"))
    writer = made(storage)
    for b in range(3):
        commit_batch(writer, Q, b, ids_of(b), mode=mode)
    writer.close()
    dying = made(storage, fail_at="after-manifest")  # published; its claim pending
    with pytest.raises(InjectedFailure):
        commit_batch(dying, Q, 3, ids_of(3), mode=mode)
    dying.janitor.drain()  # its process is gone: nothing of it writes any more (its background work done first)
    dying.lease.release()
    before = snapshot(storage)
    with pytest.raises(ConfigError):
        restarted(open_storage(str(tmp_path / "t"))).open()
    assert not changes(before, snapshot(storage)), f"{case}: the refused writer changed the table: {changes(before, snapshot(storage))[:8]}"
    good = made(open_storage(str(tmp_path / "t")))
    good.open()
    assert good.latest_batch_id == 3
    good.close()
    want = Counter(i for b in range(4) for i in ids_of(b))
    assert Counter(read.arrow(str(tmp_path / "t"), columns=["id"]).column("id").to_pylist()) == want
