"""A writer frozen with SIGSTOP loses its lease; when resumed with SIGCONT it never publishes -
whether its successor has already finished (``test_paused_zombie_never_publishes``) or is still
running next to it (``test_zombie_wakes_next_to_a_live_successor``)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from streaming_exactly_once.maintenance.repair import recover_table
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.commits_log import CommitsLog
from tests.torture.harness import TortureConfig, TortureRun
from tests.torture.verify import verify_tortured_table

pytestmark = [pytest.mark.spark, pytest.mark.torture]


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] == "T"


# Before and after the claim at Spark level; tests/torture/test_zombie_commit.py pauses at every boundary.
@pytest.mark.parametrize("pause_at", [pytest.param("before-wal@2", marks=pytest.mark.long), "after-manifest@2"])
def test_paused_zombie_never_publishes(spark, tmp_path, pause_at):
    run = TortureRun(TortureConfig(work=tmp_path, lease_timeout="3s", files_per_trigger=1, log=False))
    run.feed(3)
    zombie = run.launch(mode="rename", env_extra={"SEO_PAUSE_AT": pause_at})
    started = run.wait_started(zombie, 120)
    assert started and started[-1].startswith("STARTED"), started
    zombie_epoch = int(started[-1].split()[-1])
    deadline = time.time() + 120
    while not _stopped(zombie.pid):
        assert time.time() < deadline and zombie.poll() is None, "".join(zombie._seo_lines)[-3000:]
        time.sleep(0.1)
    time.sleep(4)  # the zombie's lease (3s) expires while it is frozen
    run.feed(3)
    run.done_marker.write_text("done")
    successor = run.launch(mode="rename")
    started = run.wait_started(successor, 120)
    assert started[-1].startswith("STARTED"), "".join(successor._seo_lines)[-3000:]
    successor_epoch = int(started[-1].split()[-1])
    assert successor_epoch > zombie_epoch
    assert successor.wait(timeout=180) == 0, "".join(successor._seo_lines)[-3000:]
    storage = open_storage(str(run.table))
    before = {b: r.committed_by_epoch for b in CommitsLog(storage, interval=10).list_batch_ids() if (r := CommitsLog(storage, interval=10).record(b))}
    os.kill(zombie.pid, signal.SIGCONT)
    code = zombie.wait(timeout=120)
    zombie._seo_pump.join(timeout=10)
    output = "".join(zombie._seo_lines)
    # It stops either at our fence (WriterFencedError) or - if it woke up inside a batch it had
    # already claimed, which the successor completed for it - at Spark's own guard on the shared
    # checkpoint. Either way it must not have published anything.
    assert code != 0 and ("FENCED" in output or "CONCURRENT_STREAM_LOG_UPDATE" in output), output[-3000:]
    if pause_at.startswith("before-wal"):
        assert code == 4 and "FENCED" in output, output[-3000:]
    after = {b: r.committed_by_epoch for b in CommitsLog(storage, interval=10).list_batch_ids() if (r := CommitsLog(storage, interval=10).record(b))}
    assert after == before  # the zombie added nothing after it woke up
    recover_table(storage, lease_timeout_ms=3000)  # removes a claim the zombie made after the takeover
    result = verify_tortured_table(run.table, run.input, spark)
    assert result["vanilla_spark"]["duplicates"] == 0 and result["vanilla_spark"]["losses"] == 0


@pytest.mark.long
def test_zombie_wakes_next_to_a_live_successor(spark, tmp_path):
    """The driver freezes right after publishing the manifest entry of its second batch (claimed
    before the takeover: the successor rolls it forward). The successor commits through a
    compaction while the zombie is frozen and is still running when the zombie wakes up, finishes
    its batch and lets its background work (staging cleanup, compaction preparation) run next to
    the live successor. Then the successor commits through another compaction and drains: every
    input row must be in the table exactly once for every reader, vanilla Spark included."""
    run = TortureRun(TortureConfig(work=tmp_path, lease_timeout="3s", files_per_trigger=1, compact_interval=3, log=False))
    outcome = run.zombie_takeover(mode="rename", pause_at="after-manifest@2")
    assert outcome in ("fenced", "spark-checkpoint-guard")
    recover_table(open_storage(str(run.table)), lease_timeout_ms=3000)  # what the next start does
    result = verify_tortured_table(run.table, run.input, spark)
    for reader in ("independent_pyarrow", "library_arrow", "vanilla_spark"):
        assert result[reader]["duplicates"] == 0 and result[reader]["losses"] == 0, (reader, result[reader])
