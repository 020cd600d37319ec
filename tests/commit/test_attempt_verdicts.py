"""A late WAL claim and a stale recovery against the attempt verdicts (``commit.protocol.attempt_verdict``).

Red-team findings rt01-rt03 of issue 16's second review: a frozen writer's late claim was rolled
forward after ``seo gc`` (which wrote no recovery record) or an earlier recovery (whose record was
pruned after 16 more takeovers) had deleted its data, and a recoverer frozen inside its recovery
judged later ones with a stale WAL listing - publishing deleted files, or deleting the files of a
published batch. Each scenario ends the way Spark would: a last writer opens the table and
re-runs Spark batch 0 if (and only if) it is not committed; readers must then see the batch's
rows exactly once and every listed file must exist. Real processes, real SIGSTOP/SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.commit.processes import process_state
from tests.commit.verdict_roles import LEASE_MS, ROWS
from tests.sink.conftest import REPO

pytestmark = pytest.mark.torture


class Role:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.commit.verdict_roles", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def wait_frozen(self, timeout: float = 60.0) -> Role:
        deadline = time.time() + timeout
        while process_state(self.proc.pid) != "T":
            assert self.proc.poll() is None, f"exited before it froze:\n{self.proc.stdout.read()}"
            assert time.time() < deadline, "never froze"
            time.sleep(0.05)
        return self

    def finish(self, *, resume: bool = False) -> dict[str, str]:
        if resume:
            os.kill(self.proc.pid, signal.SIGCONT)
        out, _ = self.proc.communicate(timeout=120)
        said = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line and not line.startswith((" ", "\t")))
        said["_output"] = out
        return said


def run(*args: str) -> dict[str, str]:
    return Role(*args).finish()


@pytest.fixture
def outlive_lease(lease_clock):
    """Every role reads the test's shared lease clock: moved past the lease, not slept through."""
    return lambda: lease_clock.advance(LEASE_MS / 1000 + 1.0)


def assert_batch_once(root: Path, mode: str) -> dict[str, str]:
    final = run("final", str(root), mode)
    assert final.get("rows") == str(ROWS), final["_output"][-3000:]
    return final


@pytest.mark.parametrize("mode", ["direct", "rename"])
def test_gc_aborts_a_frozen_writers_staging_and_its_late_claim_never_publishes(tmp_path, mode, outlive_lease):
    """rt01: gc takes the lease and aborts the frozen writer's staging as stale; the writer wakes,
    claims, is fenced; the next writer discards the claim and Spark's re-run commits the rows."""
    zombie = Role("zombie", str(tmp_path), mode).wait_frozen()
    outlive_lease()
    assert run("gc", str(tmp_path))["gc aborted"] == "1"
    assert zombie.finish(resume=True)["zombie"] == "fenced"
    assert (tmp_path / "_seo" / "wal" / "0").exists(), "the late claim is the point of the scenario"
    final = assert_batch_once(tmp_path, mode)
    assert final["batch 0 committed before"] == "False"
    assert "discarded=[0]" in final["recovery"]


def test_a_late_claim_stays_void_after_seventeen_takeovers(tmp_path, outlive_lease):
    """rt02: the verdict that voids a late claim is not pruned with the epochs."""
    zombie = Role("zombie", str(tmp_path), "direct").wait_frozen()
    outlive_lease()
    run("takeover", str(tmp_path))  # aborts the zombie's attempt: its data files are deleted
    assert zombie.finish(resume=True)["zombie"] == "fenced"
    run("gc", str(tmp_path), "17")  # 17 lease holders one after the other that recover nothing
    final = assert_batch_once(tmp_path, "direct")
    assert final["batch 0 committed before"] == "False"


def test_a_recoverer_frozen_before_its_listing_does_not_publish_an_aborted_claim(tmp_path, outlive_lease):
    """rt03 'valid': F lists the WAL only after S aborted the zombie's attempt and the zombie
    claimed; F must not roll the claim forward (its data is gone)."""
    zombie = Role("zombie", str(tmp_path), "direct").wait_frozen()
    outlive_lease()
    frozen = Role("frozen", str(tmp_path), "before-listing").wait_frozen()
    outlive_lease()
    run("takeover", str(tmp_path))
    assert zombie.finish(resume=True)["zombie"] == "fenced"
    assert frozen.finish(resume=True)["frozen"] == "fenced"
    assert not any((tmp_path / "_spark_metadata").glob("[0-9]*")), "a batch whose data was deleted got published"
    final = assert_batch_once(tmp_path, "direct")
    assert final["batch 0 committed before"] == "False"


@pytest.mark.parametrize("crash", ["after-manifest", "after-commit"])
def test_a_recoverer_frozen_after_its_listing_does_not_delete_a_published_batch(tmp_path, crash, outlive_lease):
    """rt03 'void': F saw no claim and froze; the zombie claimed (its data intact); S rolled the
    claim forward and was killed; F wakes with its stale view and must delete nothing of it."""
    zombie = Role("zombie", str(tmp_path), "direct").wait_frozen()
    outlive_lease()
    frozen = Role("frozen", str(tmp_path), "before-verdict").wait_frozen()
    assert zombie.finish(resume=True)["zombie"] == "fenced"
    outlive_lease()
    killed = Role("rollforward", str(tmp_path), crash)
    killed.finish()
    assert killed.proc.returncode == -signal.SIGKILL
    assert frozen.finish(resume=True)["frozen"] == "fenced"
    final = assert_batch_once(tmp_path, "direct")
    assert final["batch 0 committed before"] == "True"


CLAIMED = [
    ("direct", "before-listing", ""),
    ("direct", "after-listing", ""),
    ("rename", "after-listing", ""),
    ("rename", "before-listing", "group"),
    ("rename", "after-listing", "group"),
]


@pytest.mark.parametrize("mode,where,group", CLAIMED)
def test_a_claim_completed_during_a_takeovers_recovery_keeps_its_records(tmp_path, mode, where, group, outlive_lease):
    """rt04/rt05: a fenced writer past its last fence check completes its batch while the new
    writer's recovery runs. The recovery lists the WAL before it reads the latest batch, so it
    either rolls the claim forward too or sees the batch published - never a published batch
    taken for a stale intent (whose offsets record it deleted, failing the next open)."""
    extra = (group,) if group else ()
    claimer = Role("claimer", str(tmp_path), mode, *extra).wait_frozen()
    outlive_lease()
    stale = Role("stale", str(tmp_path), where, mode, *extra).wait_frozen()
    assert claimer.finish(resume=True)["claimer"] in ("committed as batch 0", "fenced")
    said = stale.finish(resume=True)
    assert said.get("batch 1") == "committed as batch 1", said["_output"][-3000:]
    assert "reopened" in said, said["_output"][-3000:]  # no missing offsets record, no conflict
    assert said["rows"] == str(list(range(20)))


@pytest.mark.parametrize("crash", ["after-wal", "after-manifest"])
def test_discard_wal_refuses_a_claim_that_can_be_completed(tmp_path, crash):
    """rt06: a complete claim may be completed at any moment (a frozen writer past its fence
    check, a recoverer); `--discard-wal` deleting its files would publish missing files."""
    killed = Role("crasher", str(tmp_path), crash, "direct")
    killed.finish()
    assert killed.proc.returncode == -signal.SIGKILL
    said = run("discard", str(tmp_path), "now")
    assert "completed, not discarded" in said.get("discard raised", "") or "published" in said.get("discard raised", ""), said["_output"]
    final = assert_batch_once(tmp_path, "direct")
    assert final["batch 0 committed before"] == "True"  # rolled forward, not re-run


def test_discard_wal_drops_a_claim_whose_files_are_gone(tmp_path):
    """The case `--discard-wal` exists for: the claim names a file deleted outside the protocol;
    recovery refuses to publish it, the discard drops it, Spark re-runs the batch."""
    killed = Role("crasher", str(tmp_path), "after-wal", "direct")
    killed.finish()
    next(tmp_path.glob("p=a/part-0-*")).unlink()
    said = run("takeover", str(tmp_path))
    assert "--discard-wal 0" in said["_output"]
    assert run("discard", str(tmp_path), "now").get("discard") == "discarded WAL entry 0"
    final = assert_batch_once(tmp_path, "direct")
    assert final["batch 0 committed before"] == "False"


@pytest.mark.parametrize("damage", ["torn", "directory"])
def test_a_damaged_verdict_is_named_and_its_hint_leads_back_to_exactly_once(tmp_path, damage, outlive_lease):
    """rt08: a late claim whose verdict ('abort') is damaged. The next writer names the file and
    decides nothing blind; following the error's hint (delete it, recover) re-judges the claim,
    which cannot publish (its files were deleted) and is dropped by the command it names."""
    zombie = Role("zombie", str(tmp_path), "direct").wait_frozen()
    outlive_lease()
    run("takeover", str(tmp_path))  # aborts the zombie's attempt: verdict 'abort', data deleted
    assert zombie.finish(resume=True)["zombie"] == "fenced"
    (verdict,) = (tmp_path / "_seo" / "verdicts").iterdir()
    verdict.unlink()
    if damage == "torn":
        verdict.write_bytes(b'v1\n{"verdict":"ab')
    else:
        verdict.mkdir()
    said = run("takeover", str(tmp_path))
    assert "LogCorruptError" in said["_output"] and verdict.name in said["_output"], said["_output"][-2000:]
    assert "delete the file and run `seo recover" in said["_output"]
    (verdict.rmdir if verdict.is_dir() else verdict.unlink)()
    said = run("takeover", str(tmp_path))
    assert "--discard-wal 0" in said["_output"], said["_output"][-2000:]
    assert run("discard", str(tmp_path), "now").get("discard") == "discarded WAL entry 0"
    final = assert_batch_once(tmp_path, "direct")
    assert final["batch 0 committed before"] == "False"


def test_a_recoverer_frozen_in_a_discard_leaves_the_next_writers_claim_alone(tmp_path, outlive_lease):
    """Red-team 3b: batch numbers are reused. R froze while discarding a void claim on batch 0;
    S discarded it too, re-ran the batch as manifest batch 0 and was killed after publishing.
    R wakes: deleting _seo/wal/0 by number would strand S's batch (its data aborted next)."""
    zombie = Role("zombie", str(tmp_path), "direct").wait_frozen()
    outlive_lease()
    run("takeover", str(tmp_path))
    assert zombie.finish(resume=True)["zombie"] == "fenced"  # a void claim on batch 0 remains
    stale = Role("stalediscard", str(tmp_path)).wait_frozen()
    outlive_lease()
    successor = Role("paused", str(tmp_path), "direct", "after-manifest").wait_frozen()
    assert stale.finish(resume=True)["stalediscard"] == "fenced"
    assert (tmp_path / "_seo" / "wal" / "0").exists(), "the successor's claim was deleted"
    successor.proc.kill()
    successor.finish()
    final = assert_batch_once(tmp_path, "direct")
    assert final["batch 0 committed before"] == "True"


def test_a_frozen_discard_wal_leaves_the_next_writers_claim_alone(tmp_path, outlive_lease):
    """Red-team 2a: `--discard-wal` froze right before deleting (its checks passed, its lease
    ran out); S re-ran the batch under the same number and was killed after publishing."""
    Role("crasher", str(tmp_path), "after-wal", "direct").finish()
    next(tmp_path.glob("p=a/part-0-*")).unlink()  # the case --discard-wal exists for
    discard = Role("discard", str(tmp_path), "freeze").wait_frozen()
    outlive_lease()
    successor = Role("paused", str(tmp_path), "direct", "after-manifest").wait_frozen()
    assert discard.finish(resume=True).get("discard") == "discarded WAL entry 0"
    assert (tmp_path / "_seo" / "wal" / "0").exists(), "the successor's claim was deleted"
    successor.proc.kill()
    successor.finish()
    final = assert_batch_once(tmp_path, "direct")
    assert final["batch 0 committed before"] == "True"


def test_discard_wal_never_overrules_the_commit_verdict_of_a_writer_that_took_over_meanwhile(tmp_path):
    """`--discard-wal` of a claim whose staged file is gone; a writer takes the table over from
    it right before it writes its verdict (the command froze past its lease), judges the claim
    'commit' and tries to roll it forward. The command must see that verdict came from a newer
    epoch than its own, leave it standing and stop, having deleted nothing."""
    import time as clock

    from streaming_exactly_once.commit.protocol.attempt_verdict import COMMIT, read_verdict
    from streaming_exactly_once.commit.protocol.wal import CommitSequenceStore
    from streaming_exactly_once.errors import ExactlyOnceError
    from streaming_exactly_once.maintenance.repair import discard_wal
    from streaming_exactly_once.storage import open_storage
    from streaming_exactly_once.testing.faults import FaultInjectingStorage, Rule, Where
    from tests.commit.helpers import make_committer
    from tests.commit.processes import QA, Writer

    root = tmp_path / "t"
    crashed = Writer(
        {
            "name": "W",
            "root": str(root),
            "steps": [
                {"do": "open"},
                {"do": "commits", "query": QA},
                {"do": "commits", "query": QA, "crash_at": "after-wal"},
            ],
        }
    )
    assert crashed.wait(60) == -9, crashed.output()
    storage = open_storage(str(root))
    claim = CommitSequenceStore(storage).get(1)
    next(root.glob(f"_seo/staging/*{claim.attempt}*/data/p=a/part-00000-*")).unlink()  # what --discard-wal is for

    def takeover() -> None:
        successor = make_committer(storage)
        successor.lease.clock = lambda: clock.time() + 3600  # the command's lease has run out
        with pytest.raises(ExactlyOnceError):  # its roll-forward cannot move the missing file
            successor.open()

    faulty = FaultInjectingStorage(storage)
    faulty.arm([Rule(Where(("put_if_absent",), r"^_seo/verdicts/", "before"), "call", callback=takeover)])
    with pytest.raises(ExactlyOnceError, match="took .* over while this command ran"):
        discard_wal(faulty, 1)
    held = read_verdict(storage, 1, claim.attempt)
    assert held is not None and held.verdict == COMMIT, f"the newer writer's verdict was overruled: {held}"
    assert held.epoch == 3, f"a verdict records the epoch that decided it (the successor's, 3): {held}"
    assert CommitSequenceStore(storage).get(1) is not None, "the claim was discarded"
