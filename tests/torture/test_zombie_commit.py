"""The bounded zombie torture of the default suite, at the commit layer (no Spark).

One run per commit boundary of a single table in ``rename`` and in ``direct`` mode and of a
dataset group (33 runs, seeds 0-32): a writer frozen there with SIGSTOP loses its lease, a
successor takes over and commits, the frozen writer wakes up next to the live successor. Every
run must end with each committed row read exactly once, the zombie fenced, the successor and
the next start unharmed (``tests.torture.zombie_run`` says what each run does and checks).
The long run is ``python -m tests.torture.zombie_run --runs 500 --jobs 2``.
"""

from __future__ import annotations

import pytest

from tests.torture.zombie_run import PAIRS, run_many

pytestmark = [pytest.mark.torture, pytest.mark.slow]


@pytest.mark.long
def test_zombie_at_every_commit_boundary(tmp_path):
    summary = run_many(runs=len(PAIRS), seed=0, work=tmp_path, jobs=2, log=print)
    assert set(summary["per_boundary"]) == {f"{kind}:{b}" for kind, b in PAIRS}, "a boundary was never tried"
    lines = [f"seed {f['seed']} {f['key']}: " + " | ".join(w[:300] for w in f["what"]) for f in summary["failures"]]
    assert summary["failed_runs"] == 0, (
        f"{summary['failed_runs']} of {summary['runs']} zombie runs failed ({summary['duplicates']} duplicated ids, "
        f"{summary['losses']} lost ids); replay one with python -m tests.torture.zombie_run --runs 1 --seed N\n" + "\n".join(lines)
    )
