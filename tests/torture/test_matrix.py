"""The bounded slice of the torture matrix (``tests.torture.matrix``) for ``make test``.

Every supported combination (``matrix_combos.COMBOS``: staging mode x manifest location x
format x table or dataset group x local disk or moto's S3) once, killed at the points most
likely to break (``LIKELY``: the claim, the moves, the manifest, Delta and Iceberg steps, the
commit record, the janitor's record sync, a group's members; ``bounded_plan`` spreads them over the
combinations, an Iceberg table's kills start with its own step's), then a zombie takeover or a
restart with a wrong configuration right after the kill (turn about), maintenance commands after
each cycle, and the final drain, recover, gc and verify;
``seo audit --from 0`` after every cycle. The combinations run two at a time in one fixture;
each has its own test, which fails with that combination's problems. The long run is
``python -m tests.torture.matrix --kills 300``.
"""

from __future__ import annotations

import json

import pytest

from tests.torture.matrix import run_matrix, s3_options
from tests.torture.matrix_combos import COMBOS, LIKELY, Combo

pytestmark = [pytest.mark.torture, pytest.mark.slow, pytest.mark.s3]


def bounded_plan(combo: Combo, index: int) -> list[tuple[str, str]]:
    """One kill at one of the likely points (the window moves along the list from one combination
    to the next), then a zombie or a wrong configuration, turn about. An Iceberg table: two kills
    (its own step has three likely points and two combinations share them) and a wrong
    configuration. Every likely point is killed somewhere; the long run kills at every boundary."""
    likely = [b for b in LIKELY if b in combo.boundaries]
    if combo.iceberg:  # its own step's boundaries first: before it (with Delta: between the two steps) and inside it
        likely = [b for b in likely if "iceberg" in b] + [b for b in likely if "iceberg" not in b and b != "after-delta"]
        likely[2:2] = ["after-delta"] if combo.delta else []
        index = [c for c in COMBOS if c.iceberg].index(combo)  # the Iceberg slices share the window
    elif combo.group:  # likewise a group's members first
        likely = [b for b in likely if "members" in b] + [b for b in likely if "members" not in b]
        index = [c for c in COMBOS if c.group].index(combo)
    wrong = sorted(combo.wrong_configs())
    if combo.iceberg:  # a restart without one of its table formats (with Delta: the other one)
        wrong = sorted((w for w in wrong if "format" in w), reverse=combo.delta)
        kills = [likely[(2 * index + i) % len(likely)] for i in range(2)]
        return [("kill", kills[0]), ("wrong", wrong[index % len(wrong)]), ("kill", kills[1])]
    # every other compacted combination is killed where only compaction batches go
    kill = ("kill", "after-rewrite" if combo.compaction and index % 2 == 0 and "after-rewrite" in likely else likely[index % len(likely)])
    if index % 2:
        return [kill, ("zombie", likely[(index + 1) % len(likely)])]
    return [kill, ("wrong", wrong[(index // 2) % len(wrong)])]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory, moto_endpoint):
    plans = {combo: bounded_plan(combo, i) for i, combo in enumerate(COMBOS)}
    work = tmp_path_factory.mktemp("matrix")
    summary = run_matrix(plans, seed=5, work=work, s3=s3_options(moto_endpoint), jobs=2, max_commands={"local": 2, "s3": 1}, quick=True, log=print)
    (work / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"matrix summary: {work / 'summary.json'}; wall times: { ({n: s['wall_s'] for n, s in summary['per_combination'].items()}) }")
    return summary


@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: c.name)
def test_matrix_slice(matrix, combo):
    stats = matrix["per_combination"][combo.name]
    plan = bounded_plan(combo, COMBOS.index(combo))
    want = {b for what, b in plan if what == "kill"}
    assert stats["wrong_configs"] or not any(what == "wrong" for what, _ in plan), stats
    assert stats["zombies"] or not any(what == "zombie" for what, _ in plan), stats
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


def test_the_bounded_slice_kills_at_every_likely_boundary_somewhere():
    killed = {b for i, combo in enumerate(COMBOS) for what, b in bounded_plan(combo, i) if what == "kill"}
    assert killed == set(LIKELY)
