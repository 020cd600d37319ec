"""The bounded torture run of the default test suite: real SIGKILLs of Spark drivers at the
commit boundaries, checkpoint deletions, replays, a second writer - then an independent count.

Two tables are tortured at once: one harness kills in rename mode, the other in direct mode, and
each also runs the other mode. Each kill costs a Spark driver start-up, so ``make test`` kills
each table at one boundary of every class (``CLASSES``: before the claim, while the claimed
batch's files move, at its publication, in the janitor's steps after the commit) - the mode's
own boundaries among them; ``test_torture_kills_at_every_boundary`` (``long``) kills at every
boundary of both modes, the commit-layer matrix (``test_matrix``) kills each in both modes, and
``make torture`` runs the long mix.
"""

from __future__ import annotations

import threading

import pytest

from tests.torture.harness import DIRECT_BOUNDARIES, RENAME_BOUNDARIES, TortureConfig, TortureRun, boundaries_of
from tests.torture.verify import verify_tortured_delta, verify_tortured_group, verify_tortured_kafka, verify_tortured_table

pytestmark = [pytest.mark.spark, pytest.mark.torture]

#: a single table's commit boundaries by what a kill there leaves for the next run to do
CLASSES = {
    "before the claim: the batch is written again": ("before-stage", "after-stage", "after-intent", "before-wal"),
    "claimed, its files on their way: rolled forward": ("after-wal", "mid-move", "after-move"),
    "at and after its publication: nothing to redo": ("after-manifest", "after-manifest+3ms", "after-sources", "after-commit"),
    "the janitor's steps after the commit": ("after-cleanup", "after-records-sync", "after-wal-delete"),
}
#: one boundary of every class per mode (the modes' own: mid-move, after-cleanup)
BOUNDED_RENAME = ("after-intent", "mid-move", "after-manifest+3ms", "after-wal-delete")
BOUNDED_DIRECT = ("before-wal", "after-wal", "after-commit", "after-cleanup")


def torture_two_tables(spark, tmp_path, rename_kills: tuple[str, ...], direct_kills: tuple[str, ...]) -> list[TortureRun]:
    """A rename-mode harness killing at ``rename_kills`` (with a checkpoint deletion, a replay and
    a second writer) beside a direct-mode one killing at ``direct_kills`` (a checkpoint deletion
    and a replay), each running the other mode once; every row read once by vanilla Spark."""
    configs = [
        TortureConfig(
            work=tmp_path / "a",
            kills=len(rename_kills) + 1,
            seed=11,
            rows_per_file=10,
            checkpoint_deletions=1,
            replays=1,
            concurrent_writers=1,
            boundary_modes=("rename",),
            boundaries=rename_kills,
            name="torture-a",
        ),
        TortureConfig(
            work=tmp_path / "b",
            kills=len(direct_kills) + 1,
            seed=12,
            rows_per_file=10,
            checkpoint_deletions=1,
            replays=1,
            concurrent_writers=0,
            boundary_modes=("direct",),
            boundaries=direct_kills,
            name="torture-b",
        ),
    ]
    runs = [TortureRun(c) for c in configs]
    errors: list[BaseException] = []

    def go(run: TortureRun) -> None:
        try:
            run.run()
        except BaseException as exc:  # reported below, with the other harness finished
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    stats = [r.stats for r in runs]
    print(f"torture: {sum(s.kills for s in stats)} kills, {stats}")
    assert sum(s.kills for s in stats) >= len(rename_kills) + len(direct_kills), stats
    for run, kills in zip(runs, (rename_kills, direct_kills), strict=True):
        never_hit = set(kills) - set(run.stats.boundary_kills)
        assert not never_hit, f"{run.c.name}: boundaries never hit: {never_hit}; {run.stats}"
    assert sum(s.checkpoint_deletions for s in stats) == 2 and sum(s.replays for s in stats) >= 1, stats
    assert sum(s.concurrent_rejected for s in stats) == 1, stats
    for run in runs:
        assert run.stats.mode_runs.get("rename") and run.stats.mode_runs.get("direct"), run.stats.mode_runs
        result = verify_tortured_table(run.table, run.input, spark)
        print(f"verification {run.c.name}: {result}")
        assert result["vanilla_spark"]["duplicates"] == 0 and result["vanilla_spark"]["losses"] == 0
    return runs


def test_bounded_torture(spark, tmp_path):
    runs = torture_two_tables(spark, tmp_path, BOUNDED_RENAME, BOUNDED_DIRECT)
    for run, mode in zip(runs, ("rename", "direct"), strict=True):
        missed = [c for c, members in CLASSES.items() if not set(members) & set(run.stats.boundary_kills)]
        assert not missed, f"{mode}: no kill {missed}; {run.stats}"


def test_every_boundary_has_a_class_and_the_bounded_kills_hit_each_class_in_each_mode():
    assert sorted(b for members in CLASSES.values() for b in members) == sorted(set(RENAME_BOUNDARIES) | set(DIRECT_BOUNDARIES))
    for kills, mode in ((BOUNDED_RENAME, "rename"), (BOUNDED_DIRECT, "direct")):
        assert set(kills) <= set(boundaries_of(mode)), mode
        assert all(set(members) & set(kills) for members in CLASSES.values()), mode
    assert {"mid-move", "after-cleanup"} <= set(BOUNDED_RENAME) | set(BOUNDED_DIRECT)  # each mode's own


@pytest.mark.long
def test_torture_kills_at_every_boundary(spark, tmp_path):
    """Every boundary once, in a mode that reaches it (the shared ones split between the modes)."""
    shared = [b for b in RENAME_BOUNDARIES if b in DIRECT_BOUNDARIES]
    rename_kills = tuple(b for b in RENAME_BOUNDARIES if b not in DIRECT_BOUNDARIES) + tuple(shared[::2])
    direct_kills = tuple(b for b in DIRECT_BOUNDARIES if b not in RENAME_BOUNDARIES) + tuple(shared[1::2])
    runs = torture_two_tables(spark, tmp_path, rename_kills, direct_kills)
    hit = set().union(*(r.stats.boundary_kills for r in runs))
    assert not (set(RENAME_BOUNDARIES) | set(DIRECT_BOUNDARIES)) - hit, [r.stats for r in runs]


@pytest.mark.connect
@pytest.mark.long
def test_bounded_torture_under_spark_connect(spark, tmp_path):
    """The same harness with Spark Connect drivers (``make torture ARGS=--connect`` kills at
    every boundary): the sink runs in the server's worker, which is killed at a boundary or with
    the whole driver; a checkpoint deletion, a replay and a second writer are mixed in."""
    config = TortureConfig(
        work=tmp_path / "c",
        kills=6,
        seed=21,
        rows_per_file=10,
        checkpoint_deletions=1,
        replays=1,
        concurrent_writers=1,
        boundary_modes=("rename",),
        random_kill_share=0.5,
        name="torture-connect",
        connect=True,
        boundaries=("after-wal", "mid-move", "after-manifest+3ms", "after-commit", "before-wal"),
        run_timeout_s=120.0,
    )
    run = TortureRun(config)
    run.run()
    print(f"torture under Spark Connect: {run.stats}")
    assert run.stats.kills >= 6 and len(run.stats.boundary_kills) >= 5, run.stats
    assert run.stats.concurrent_rejected == 1 and run.stats.checkpoint_deletions == 1
    result = verify_tortured_table(run.table, run.input, spark)
    print(f"verification: {result}")
    assert result["vanilla_spark"]["duplicates"] == 0 and result["vanilla_spark"]["losses"] == 0
    assert result["independent_pyarrow"]["duplicates"] == 0 and result["independent_pyarrow"]["losses"] == 0


@pytest.mark.connect
@pytest.mark.long
def test_dataset_group_torture_under_spark_connect(spark, tmp_path):
    """A DatasetSink (a fork and one table per dataset) under Spark Connect: its mapInArrow
    writer runs from the server's foreachBatch worker, which is killed at group boundaries."""
    config = TortureConfig(
        work=tmp_path / "g",
        kills=3,
        seed=31,
        rows_per_file=10,
        checkpoint_deletions=0,
        replays=0,
        concurrent_writers=0,
        boundary_modes=("rename",),
        random_kill_share=0.0,
        name="torture-connect-forks",
        connect=True,
        forks=True,
        boundaries=("after-wal", "mid-members", "after-commit"),
        run_timeout_s=120.0,
    )
    run = TortureRun(config)
    run.run()
    print(f"group torture under Spark Connect: {run.stats}")
    assert len(run.stats.boundary_kills) >= 3, run.stats
    result = verify_tortured_group(run.table, run.input, spark)
    print(f"verification: {result}")
    assert result["vanilla_spark"]["duplicates"] == 0 and result["vanilla_spark"]["losses"] == 0, result
    assert result["byp_library"]["duplicates"] == 0 and result["byp_library"]["losses"] == 0, result
    assert result["byp_library"]["tables"] >= 2, result


@pytest.mark.long
def test_bounded_torture_of_a_delta_table(spark, tmp_path):
    """A ``format="delta"`` table killed at the Delta step's boundaries (before its commit, a few
    ms into it, right after it and a few ms after it) and at the WAL boundaries around them, a
    checkpoint deletion and a replay mixed in (``make torture ARGS=--delta`` kills at every
    boundary of both modes). Checked as Delta readers see it (delta-rs, polars: every id once, one
    Delta version per batch with our transaction) and through ``_spark_metadata``."""
    config = TortureConfig(
        work=tmp_path / "d",
        kills=8,
        seed=41,
        rows_per_file=10,
        checkpoint_deletions=1,
        replays=1,
        concurrent_writers=0,
        boundary_modes=("rename",),
        random_kill_share=0.5,
        name="torture-delta",
        delta=True,
        boundaries=("after-wal", "after-manifest", "after-manifest+3ms", "after-delta", "after-delta+3ms", "after-commit"),
    )
    run = TortureRun(config)
    run.run()
    print(f"torture of a Delta table: {run.stats}")
    assert {"after-manifest", "after-delta"} <= set(run.stats.boundary_kills), run.stats
    assert len(run.stats.boundary_kills) >= 5 and run.stats.checkpoint_deletions == 1, run.stats
    result = verify_tortured_table(run.table, run.input, spark)
    assert result["vanilla_spark"]["duplicates"] == 0 and result["vanilla_spark"]["losses"] == 0
    delta = verify_tortured_delta(run.table, run.input)
    print(f"verification: {result}\ndelta: {delta}")
    assert delta["delta_rs"]["duplicates"] == 0 and delta["delta_rs"]["losses"] == 0, delta
    assert delta["polars_delta"]["duplicates"] == 0 and delta["polars_delta"]["losses"] == 0, delta
    assert delta["delta_versions"] == delta["manifest_batches_with_files"] >= 3 and delta["manifest_batches"] == result["batches"], delta


def test_bounded_torture_of_a_private_manifest_delta_table(spark, tmp_path):
    """A ``format="delta"`` table written with ``spark_manifest=False`` (its manifest only in
    ``_seo/manifest``) by a real streaming query, killed before, inside and after its Delta
    commit and after its claim and commit record (``make torture ARGS="--delta
    --private-manifest"`` kills at every boundary). Checked as Delta readers see it and through
    its own manifest; no ``_spark_metadata`` may appear."""
    config = TortureConfig(
        work=tmp_path / "p",
        kills=5,
        seed=51,
        rows_per_file=10,
        checkpoint_deletions=0,
        replays=1,
        concurrent_writers=0,
        boundary_modes=("direct",),
        random_kill_share=0.0,
        name="torture-private",
        delta=True,
        private_manifest=True,
        boundaries=("after-wal", "after-manifest", "after-delta", "after-delta+3ms", "after-commit"),
    )
    run = TortureRun(config)
    run.run()
    print(f"torture of a private-manifest Delta table: {run.stats}")
    assert {"after-manifest", "after-delta", "after-commit"} <= set(run.stats.boundary_kills), run.stats
    assert not (run.table / "_spark_metadata").exists(), "a spark_manifest=False table grew a _spark_metadata"
    result = verify_tortured_table(run.table, run.input, manifest="_seo/manifest")
    assert result["library_arrow"]["duplicates"] == 0 and result["library_arrow"]["losses"] == 0, result
    delta = verify_tortured_delta(run.table, run.input, manifest="_seo/manifest")
    print(f"verification: {result}\ndelta: {delta}")
    assert delta["delta_rs"]["duplicates"] == 0 and delta["delta_rs"]["losses"] == 0, delta
    assert delta["delta_versions"] == delta["manifest_batches_with_files"] >= 3 and delta["manifest_batches"] == result["batches"], delta


@pytest.mark.long
def test_bounded_torture_of_a_kafka_like_source(spark, tmp_path):
    """The Kafka stand-in (``streaming_exactly_once.testing.fake_kafka``) read into a table, killed at every
    rename-mode boundary (and once in direct mode), a replay and two checkpoint deletions mixed
    in: the first new query starts from ``startingOffsets=earliest`` (the sink drops what the
    table holds, row by row), the second from ``sink.starting_offsets()`` (exactly where the
    table's records end: nothing to drop) - while topic b grows a partition. Every produced
    record must be in the table once, at the offset it was produced at, and the table's offsets
    must be the partitions' ends (``make torture ARGS=--kafka`` runs the long mix, both modes)."""
    config = TortureConfig(
        work=tmp_path / "k",
        kills=14,
        seed=61,
        rows_per_file=10,
        checkpoint_deletions=2,
        replays=1,
        concurrent_writers=0,
        boundary_modes=("rename",),
        random_kill_share=0.0,
        name="torture-kafka",
        kafka=True,
        run_timeout_s=90.0,
    )
    run = TortureRun(config)
    run.run()
    stats = run.stats
    print(f"torture of a Kafka-like source: {stats}")
    result = verify_tortured_kafka(run.table, run.kafka, spark)
    print(f"verification: {result}")
    for reader in ("vanilla_spark", "independent_pyarrow", "library_arrow"):
        assert result[reader]["duplicates"] == 0 and result[reader]["losses"] == 0, result
    assert result["partitions"] == 5 and result["expected_rows"] == stats.kafka_records, result
    never_hit = set(boundaries_of("rename")) - set(stats.boundary_kills)
    assert not never_hit, f"boundaries never hit: {never_hit}; {stats}"
    assert stats.kills >= 14 and stats.mode_runs.get("direct"), stats
    assert stats.kafka_restarts == {"earliest": 1, "table": 1}, stats
    # from earliest the committed records came again and were dropped; from the table's offsets none did
    assert stats.kafka_dropped.get("earliest", 0) > 0 and stats.kafka_dropped.get("table", 0) == 0, stats.kafka_dropped
