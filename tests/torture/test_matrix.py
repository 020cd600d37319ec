"""The bounded slice of the torture matrix (``tests.torture.matrix``) for ``make test``.

Every supported combination (``matrix_combos.COMBOS``: staging mode x manifest location x
format x table or dataset group x local disk or moto's S3) gets one cycle (``BOUNDED``), the
action turn about: a kill at one of the points most likely to break (``LIKELY``), a zombie
takeover, or a kill followed at once by a restart with a wrong configuration (refused before
anything repairs the crash). Each action meets a single table and a dataset group, a plain, a
Delta and a private-manifest Delta table, both staging modes, both stores and a compacted table;
the two Iceberg combinations are killed at their own step's three points (one of them then
refuses a restart with the other table format). Every likely point is killed here; maintenance
commands follow each cycle, ``seo audit --from 0`` and the readers check the rows after it, and
the final drain, recover, gc and verify end each table. The combinations run two at a time in
one fixture; each has its own test, which fails with that combination's problems. The long run,
``python -m tests.torture.matrix --kills 300`` (``make torture-matrix``), kills every
combination at every boundary, with a zombie every fourth cycle and a refused restart after
every third kill (``long_plan``).
"""

from __future__ import annotations

import json

import pytest

from tests.torture.matrix import run_matrix, s3_options
from tests.torture.matrix_combos import BY_NAME, COMBOS, LIKELY, Combo

pytestmark = [pytest.mark.torture, pytest.mark.slow, pytest.mark.s3]

#: each combination's cycle; a wrong configuration comes right after the kill before it
BOUNDED: dict[str, list[tuple[str, str]]] = {
    "table-plain-spark-rename-local": [("kill", "mid-move")],
    "table-delta-spark-rename-local": [("zombie", "after-manifest")],
    "table-delta-private-rename-local-compacted": [("kill", "after-rewrite")],
    "table-plain-spark-direct-local-compacted": [("kill", "after-wal"), ("wrong", "as a private-manifest Delta table")],
    "table-delta-spark-direct-local": [("kill", "after-delta")],
    "table-delta-private-direct-local": [("zombie", "after-wal")],
    "group-plain-spark-rename-local": [("kill", "after-wal"), ("wrong", "another compact_interval")],
    "group-delta-spark-rename-local-compacted": [("zombie", "after-rewrite")],
    "table-plain-spark-rename-s3": [("zombie", "after-commit")],
    "table-delta-spark-rename-s3": [("kill", "after-delta"), ("wrong", "spark_manifest flipped")],
    "table-delta-private-rename-s3": [("kill", "after-commit")],
    "table-plain-spark-direct-s3": [("kill", "after-records-sync")],
    "table-delta-spark-direct-s3": [("zombie", "after-delta")],
    "table-delta-private-direct-s3": [("kill", "after-manifest"), ("wrong", "without format=delta")],
    "group-plain-spark-rename-s3": [("kill", "after-members")],
    "group-delta-spark-rename-s3": [("kill", "mid-members")],
    "table-iceberg-spark-rename-local-compacted": [("kill", "before-iceberg-publish"), ("wrong", "with the other table format too")],
    "table-delta+iceberg-spark-direct-local": [("kill", "before-iceberg"), ("kill", "mid-iceberg")],
}


def action(plan: list[tuple[str, str]]) -> str:
    """A cycle's action: kill, zombie, or wrong (a kill, then the refused restart)."""
    return "wrong" if any(what == "wrong" for what, _ in plan) else plan[0][0]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory, moto_endpoint):
    plans = {combo: BOUNDED[combo.name] for combo in COMBOS}
    work = tmp_path_factory.mktemp("matrix")
    summary = run_matrix(plans, seed=5, work=work, s3=s3_options(moto_endpoint), jobs=2, max_commands={"local": 2, "s3": 1}, quick=True, log=print)
    (work / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"matrix summary: {work / 'summary.json'}; wall times: { ({n: s['wall_s'] for n, s in summary['per_combination'].items()}) }")
    return summary


@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: c.name)
def test_matrix_slice(matrix, combo):
    stats = matrix["per_combination"][combo.name]
    plan = BOUNDED[combo.name]
    want = {b for what, b in plan if what == "kill"}
    assert len(stats["wrong_configs"]) == sum(what == "wrong" for what, _ in plan), stats
    assert len(stats["zombies"]) == sum(what == "zombie" for what, _ in plan), stats
    assert not stats["problems"], f"{combo.name}: {len(stats['problems'])} problems:\n" + "\n".join(stats["problems"])
    assert stats["duplicates"] == stats["losses"] == stats["missing_files"] == 0, stats
    assert stats["final_verify"] == "clean", stats["final_verify"]
    assert stats["final_audit"] == "clean", stats["final_audit"]
    # a janitor boundary's passes can coalesce: a kill there is tried again, and must land once
    assert want <= set(stats["boundaries"]), f"kill points never reached: {want - set(stats['boundaries'])} ({stats['not_reached']})"


def test_the_long_runs_plan_kills_at_every_boundary_with_zombies_and_refused_restarts():
    from collections import Counter

    from tests.torture.matrix import long_plan

    for combo in COMBOS:
        plan = long_plan(combo, 2 * len(combo.boundaries), zombie_every=4, wrong_every=3, seed=1)
        counts = Counter(what for what, _ in plan)
        assert {b for what, b in plan if what == "kill"} == set(combo.boundaries), combo.name
        assert counts["zombie"] >= len(combo.boundaries) // 2 and counts["wrong"] >= len(combo.boundaries) // 2, (combo.name, counts)


def _traits(combo: Combo) -> set[str]:
    fmt = "iceberg" if combo.iceberg else ("private" if combo.manifest == "private" else "delta") if combo.delta else "plain"
    return {"group" if combo.group else "table", fmt, combo.staging, combo.store, *(["compacted"] if combo.compaction else [])}


def test_the_bounded_slice_kills_at_every_likely_boundary_and_each_action_meets_every_kind():
    assert set(BOUNDED) == set(BY_NAME)
    for name, plan in BOUNDED.items():
        combo = BY_NAME[name]
        assert {b for what, b in plan if what != "wrong"} <= set(combo.boundaries), name
        assert {b for what, b in plan if what == "wrong"} <= set(combo.wrong_configs()), name
        assert all(what != "wrong" or i and plan[i - 1][0] == "kill" for i, (what, _) in enumerate(plan)), name
    assert {b for plan in BOUNDED.values() for what, b in plan if what == "kill"} == set(LIKELY)
    every = {"table", "group", "plain", "delta", "private", "rename", "direct", "local", "s3", "compacted"}
    for act in ("kill", "zombie", "wrong"):
        met = set().union(*(_traits(BY_NAME[n]) for n, plan in BOUNDED.items() if action(plan) == act))
        assert every <= met, (act, every - met)
    assert {action(BOUNDED[c.name]) for c in COMBOS if c.iceberg} == {"kill", "wrong"}
