"""Fencing with real processes: a writer frozen by SIGSTOP at a commit boundary loses its lease
to a successor and is resumed with SIGCONT. Whatever it then does, readers must see every
committed row exactly once, every listed file must exist, the successor (and the next writer)
must keep working, and the frozen writer must get ``WriterFencedError`` for anything it did not
claim before the takeover.

One test per finding of the commit-protocol review (``/work/shared/findings/commit-protocol-review``,
r01-r04, r10). They assert what a user sees - rows, files, named errors - not how the library
gets there, so they hold for any correct fix. Timing-dependent steps are pinned by the
test storage's pause points (``testing.faults``, ``pause``: the writer SIGSTOPs itself exactly there)
and by files the processes wait for.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.commit.helpers import make_committer
from tests.commit.processes import QA, QB, QC, QZ, Writer, batch_rows, stop_all
from tests.commit.readback import Readout, committed_ids, judge, library_reads, read_table, recorded_batches

pytestmark = pytest.mark.torture

LEASE_MS = 1500
#: (base id, rows per batch) of each query: ids never collide across writers
LAYOUT = {QA: (0, 10), QB: (100_000, 2), QC: (200_000, 2), QZ: (300_000, 2)}


def rows_of(query: str, spark_batch: int) -> list[int]:
    base, rows = LAYOUT[query]
    return batch_rows(base, spark_batch, rows)


def program(name: str, root: Path, steps: list[dict], *, lease_ms: int = LEASE_MS, **options) -> dict:
    return {"name": name, "root": str(root), "options": {"lease_timeout_ms": lease_ms, **options}, "steps": steps}


def commits(query: str, count: int = 1, **kw) -> dict:
    base, rows = LAYOUT[query]
    return {"do": "commits", "query": query, "count": count, "base": base, "rows": rows, **kw}


OPEN = {"do": "open", "retry_s": 5}
CLOSE = {"do": "close"}
DRAIN = {"do": "drain"}


def touch(path: Path) -> dict:
    return {"do": "touch", "path": str(path)}


def wait(path: Path) -> dict:
    return {"do": "wait", "path": str(path)}


@pytest.fixture
def outlive_lease(lease_clock):
    """A frozen writer's heartbeat stops with it: after this its lease has expired. Every writer
    reads the test's shared lease clock, moved past the lease here instead of sleeping through
    it (takeovers in real time: ``torture/test_zombie.py``, ``maintenance/test_gc.py``)."""
    return lambda: lease_clock.advance(LEASE_MS / 1000 + 0.4)


@pytest.fixture
def spawn():
    started: list[Writer] = []

    def _spawn(prog: dict, **kwargs) -> Writer:
        w = Writer(prog, **kwargs)
        started.append(w)
        return w

    yield _spawn
    stop_all(started)


def outputs(*writers: Writer) -> str:
    return "\n".join(w.output(2500) for w in writers)


def after_wake(writer: Writer, step: int) -> list[dict]:
    """The frozen writer's attempts from its paused step on."""
    return [e for e in writer.commits() if e["step"] >= step]


def summary(events: list[dict]) -> list[str]:
    return [
        f"{e['query'][:4]}/{e['batch']}: "
        + (f"committed as manifest batch {e['manifestBatch']}" if e["status"] == "committed" else e["status"])
        + (f" {e['error']}: {e['message'][:160]}" if e["status"] == "error" else "")
        for e in events
    ]


def assert_fenced(writer: Writer, step: int, *, may_finish_inflight: bool = False) -> None:
    """Every attempt of a frozen writer after it woke up failed with WriterFencedError (except
    the batch it had claimed before the takeover, which it may finish: that batch counts once)."""
    attempts = after_wake(writer, step)
    assert attempts, f"{writer.name} made no attempt after waking up\n{writer.output()}"
    judged = attempts[1:] if may_finish_inflight and attempts[0]["status"] == "committed" else attempts
    wrong = [e for e in judged if e["status"] != "error" or e["error"] != "WriterFencedError"]
    assert not wrong, (
        f"{writer.name} (epoch {attempts[0]['epoch']}) lost its lease while frozen; after SIGCONT it must be fenced "
        f"(WriterFencedError), but: {summary(wrong)}"
    )


def assert_no_errors(writer: Writer, what: str) -> None:
    failed = [e for e in writer.events() if e.get("event") == "error" or e.get("status") == "error"]
    assert not failed, f"{what}: {[(e.get('step'), e['error'], e['message'][:300]) for e in failed]}\n{writer.output()}"


def assert_rows_once(root: Path, *writers: Writer) -> None:
    """Every row of every committed batch (reported by a writer, or in the commits log) is read
    exactly once, nothing else is read, every listed file exists - by the independent parse and
    by every reader of the library."""
    committed = committed_ids([e for w in writers for e in w.events()], recorded_batches(root), rows_of)
    verdict = judge(read_table(root), committed)
    assert verdict.ok, f"independent read of {root.name}: {verdict.describe()}"
    want = Counter(committed)
    for name, got in library_reads(root).items():
        assert isinstance(got, Counter), f"{name} failed on the table: {got}"
        if name == "read.files":
            assert all(n == 1 for n in got.values()), f"{name} lists files more than once: {[f for f, n in got.items() if n > 1]}"
        else:
            assert got == want, f"{name}: {judge(Readout(ids=got), committed).describe()}"


# -- r01 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["direct", "rename"])
def test_late_wal_claim_of_fenced_writer_is_never_rolled_forward(spawn, tmp_path, mode, outlive_lease):
    """R01: A stages batch 0 and freezes right before its WAL claim; B takes over (its recovery
    aborts A's attempt and deletes its data) and stops without writing. A wakes up and writes
    its claim (nobody claimed batch 0) before its fence check stops it. The next writer C must
    not publish that claim - its data is gone - and must be able to open and write the table."""
    root = tmp_path / "t"
    a = spawn(program("A", root, [OPEN, commits(QA, mode=mode, pause_at="before-wal", after_error="stop")]))
    a.wait_stopped()
    outlive_lease()
    b = spawn(program("B", root, [OPEN, CLOSE]))
    assert b.wait() == 0, b.output()
    a.resume()
    a.wait()
    assert_fenced(a, 1)
    c = spawn(program("C", root, [OPEN, commits(QC, mode=mode, after_error="stop"), CLOSE]))
    c.wait()
    assert_no_errors(c, "the writer after the fenced one cannot write the table")
    assert_rows_once(root, a, b, c)


# -- r02, r02b -----------------------------------------------------------------------------------


def takeovers(n: int, mode: str = "direct") -> list[dict]:
    """``n`` writers one after the other: open, commit one batch, stop cleanly."""
    steps: list[dict] = []
    for i in range(n):
        steps += ([{"do": "new"}] if i else []) + [OPEN, commits(QB, mode=mode, after_error="stop"), CLOSE]
    return steps


def test_frozen_writer_stays_fenced_after_18_takeovers(spawn, tmp_path, outlive_lease):
    """R02: A freezes inside a batch; 18 writers take the table over one after another (a
    crash-looping or scheduled job). When A wakes up it must still be fenced - old epochs being
    cleaned up must not make it the owner again - and report nothing as committed."""
    root = tmp_path / "t"
    opts = dict(compact_interval=3, min_batches_to_retain=2, cleanup_delay_ms=0)
    a = spawn(program("A", root, [OPEN, commits(QA, mode="direct"), commits(QA, count=3, mode="direct", pause_at="after-intent")], **opts))
    a.wait_stopped()
    outlive_lease()
    t = spawn(program("T", root, takeovers(18), **opts))
    assert t.wait(60) == 0, t.output()
    assert [e["status"] for e in t.commits()] == ["committed"] * 18, t.output()
    a.resume()
    a.wait()
    assert_fenced(a, 2)
    assert_rows_once(root, a, t)


def test_frozen_writer_after_17_takeovers_never_recovers_the_live_table(spawn, tmp_path, outlive_lease):
    """R02b: as R02 with default retention, while writer Z (epoch 19) has a batch staged. A wakes
    up and tries twice (the sink's next foreachBatch call retries). A must be fenced both times
    - never run recovery on Z's live table (which would delete Z's staged data and intent) -
    and Z's batch must then commit."""
    root = tmp_path / "t"
    go, staged = tmp_path / "go", tmp_path / "z-staged"
    a = spawn(program("A", root, [OPEN, commits(QA, mode="direct"), commits(QA, count=2, mode="direct", pause_at="after-intent")]))
    a.wait_stopped()
    outlive_lease()
    t = spawn(program("T", root, takeovers(17)))
    assert t.wait(60) == 0, t.output()
    z = spawn(
        program(
            "Z",
            root,
            [
                OPEN,
                {"do": "stage", "query": QZ, "batch": 0, "base": LAYOUT[QZ][0], "rows": 2, "mode": "direct"},
                touch(staged),
                wait(go),
                {"do": "finish"},
                CLOSE,
            ],
        )
    )
    z.wait_for(staged.exists, "its staged batch")
    a.resume()
    a.wait()
    go.touch()
    z.wait()
    assert_fenced(a, 2)
    assert_no_errors(z, "the live writer's batch failed after the frozen writer woke up")
    assert [e["status"] for e in z.commits()] == ["committed"], z.output()
    assert_rows_once(root, a, t, z)


# -- r03, r03b, r03c -----------------------------------------------------------------------------


def test_two_writers_rolling_one_compaction_forward_publish_a_well_formed_compact_file(spawn, tmp_path, outlive_lease):
    """R03: A freezes in the middle of moving the files of compaction batch 2 (claimed before the
    takeover); B's recovery rolls that batch forward and is itself frozen half-way; A wakes up
    and finishes the batch first, then B finishes. Both may complete the same batch - the
    ``.compact`` file must be whole (header, every earlier entry) for every reader, and B must
    go on writing."""
    root = tmp_path / "t"
    opts = dict(compact_interval=3)
    a = spawn(program("A", root, [OPEN, commits(QA, count=2, files=4, drain=True), commits(QA, count=2, files=4, pause_at="mid-move")], **opts))
    a.wait_stopped()
    outlive_lease()
    b = spawn(program("B", root, [{"do": "arm", "pause_at": "mid-move"}, OPEN, commits(QB, count=3), CLOSE], **opts))
    b.wait_stopped()  # inside its roll-forward of A's batch 2
    a.resume()
    a.wait()
    b.resume()
    b.wait()
    assert_no_errors(b, "the successor failed after both writers completed compaction batch 2")
    assert_fenced(a, 2, may_finish_inflight=True)
    assert_rows_once(root, a, b)


def test_fenced_writers_background_preparation_duplicates_nothing(spawn, tmp_path, outlive_lease):
    """R03b: A freezes right after publishing batch 1; B rolls batch 1 forward, commits batch 2
    and prepares compaction 4 in the background. A wakes up, finishes batch 1 and its own
    background preparation runs. B's compaction 4 must not list any file twice: every reader,
    the JSON of ``_spark_metadata`` parsed independently included, sees each row once."""
    root = tmp_path / "t"
    ready, go = tmp_path / "b-ready", tmp_path / "go"
    opts = dict(compact_interval=5)
    a = spawn(program("A", root, [OPEN, commits(QA, drain=True), commits(QA, count=2, pause_at="after-manifest", drain=True), DRAIN, CLOSE], **opts))
    a.wait_stopped()
    outlive_lease()
    b = spawn(program("B", root, [OPEN, commits(QB, drain=True), DRAIN, touch(ready), wait(go), commits(QB, count=2, drain=True), CLOSE], **opts))
    b.wait_for(ready.exists, "batch 2")
    a.resume()
    a.wait()
    go.touch()
    b.wait()
    assert_no_errors(b, "the successor failed")
    assert_fenced(a, 2, may_finish_inflight=True)
    assert_rows_once(root, a, b)


def test_fenced_writers_background_preparation_loses_nothing(spawn, tmp_path, outlive_lease):
    """R03c: A freezes right after publishing compaction batch 4; B rolls it forward, commits
    batches 5 and 6 and prepares compaction 9. A wakes up, finishes batch 4 and starts preparing
    compaction 9 afresh. B's compaction 9 must still hold batches 5 and 6: no committed row may
    vanish for any reader."""
    root = tmp_path / "t"
    ready, go = tmp_path / "b-ready", tmp_path / "go"
    opts = dict(compact_interval=5)
    a = spawn(
        program(
            "A", root, [OPEN, commits(QA, count=4, drain=True), commits(QA, count=2, pause_at="after-manifest", drain=True), DRAIN, CLOSE], **opts
        )
    )
    a.wait_stopped()
    outlive_lease()
    b = spawn(
        program("B", root, [OPEN, commits(QB, count=2, drain=True), DRAIN, touch(ready), wait(go), commits(QB, count=3, drain=True), CLOSE], **opts)
    )
    b.wait_for(ready.exists, "batches 5 and 6")
    a.resume()
    a.wait()
    go.touch()
    b.wait()
    assert_no_errors(b, "the successor failed")
    assert_fenced(a, 2, may_finish_inflight=True)
    assert_rows_once(root, a, b)


# -- r04 -----------------------------------------------------------------------------------------


def test_fenced_writers_abort_leaves_the_successors_batch_alone(spawn, tmp_path, outlive_lease):
    """R04: A freezes right after writing its intent for batch 1; B takes over and stages its own
    batch 1. A wakes up, is fenced and aborts its attempt. B's batch must commit, and the next
    writer must be able to open the table (A's abort must not delete anything of B's)."""
    root = tmp_path / "t"
    ready, go = tmp_path / "b-ready", tmp_path / "go"
    a = spawn(program("A", root, [OPEN, commits(QA), commits(QA, pause_at="after-intent", after_error="stop")]))
    a.wait_stopped()
    outlive_lease()
    b = spawn(
        program(
            "B",
            root,
            [
                OPEN,
                {"do": "stage", "query": QB, "batch": 0, "base": LAYOUT[QB][0], "rows": 2},
                touch(ready),
                wait(go),
                {"do": "finish"},
                commits(QB),
                CLOSE,
            ],
        )
    )
    b.wait_for(ready.exists, "its staged batch")
    a.resume()
    a.wait()
    go.touch()
    b.wait()
    assert_fenced(a, 2)
    assert_no_errors(b, "the successor failed after the fenced writer aborted")
    from streaming_exactly_once.storage import open_storage

    nxt = make_committer(open_storage(str(root)), timeout_ms=LEASE_MS)
    error = None
    try:
        nxt.open()
    except Exception as exc:  # noqa: BLE001 - asserted right below
        error = f"{type(exc).__name__}: {str(exc)[:400]}"
    finally:
        nxt.lease.release()
    assert error is None, f"the next writer cannot open the table after the fenced writer's abort: {error}"
    assert_rows_once(root, a, b)


# -- a zombie whose claim loses the create to its successor's -------------------------------------


def test_a_zombie_losing_its_claim_to_the_successor_leaves_the_successors_claim_alone(spawn, tmp_path, outlive_lease):
    """A freezes right before its WAL claim of batch 1 (its fence check passed). B takes over,
    claims batch 1 itself in direct mode and dies right after publishing it: its data files are
    in place under their final names, its claim pending. A wakes up and its create of the claim
    fails: the claim there is a *newer* writer's, so A must stop - not take it for a fenced
    writer's leftover and discard it together with the published files."""
    from streaming_exactly_once.commit.protocol.wal import CommitSequenceStore
    from streaming_exactly_once.storage import open_storage

    root = tmp_path / "t"
    a = spawn(program("A", root, [OPEN, commits(QA, mode="direct"), commits(QA, mode="direct", pause_at="before-wal", after_error="stop")]))
    a.wait_stopped()
    outlive_lease()
    b = spawn(program("B", root, [OPEN, commits(QB, mode="direct", crash_at="after-manifest")]))
    assert b.wait() == -9, b.output()
    a.resume()
    a.wait()
    assert_fenced(a, 2)
    claim = CommitSequenceStore(open_storage(str(root))).get(1)
    assert claim is not None and claim.epoch == 2 and claim.query_id == QB, f"the successor's pending claim was replaced: {claim}"
    c = spawn(program("C", root, [OPEN, commits(QC), CLOSE]))
    assert c.wait() == 0, c.output()
    assert_no_errors(c, "the next writer cannot complete the successor's claim")
    assert_rows_once(root, a, b, c)


# -- r10 -----------------------------------------------------------------------------------------

UNSHARE = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")


@pytest.fixture(scope="module")
def pid_namespaces():
    try:
        ok = subprocess.run([*UNSHARE, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        pytest.skip("unshare --pid --fork --mount-proc is not permitted here (needs CAP_SYS_ADMIN)")
    return UNSHARE


def test_live_writer_in_another_pid_namespace_is_not_taken_over(spawn, tmp_path, pid_namespaces):
    """R10: two drivers in different pid namespaces with one hostname (containers with host
    networking). A is alive and heartbeating (60 s lease); B must fail fast with
    ``ConcurrentWriterError`` - A's pid means nothing in B's namespace - and A keeps writing."""
    root = tmp_path / "t"
    ready, stop = tmp_path / "a-ready", tmp_path / "stop"
    a = spawn(
        program("A", root, [OPEN, touch(ready), commits(QA, until=str(stop), sleep_s=0.2, after_error="stop"), CLOSE], lease_ms=60_000),
        prefix=pid_namespaces,
    )
    a.wait_for(ready.exists, "its lease")
    b = spawn(program("B", root, [{"do": "open"}, commits(QB, after_error="stop"), CLOSE], lease_ms=60_000), prefix=pid_namespaces)
    b.wait()
    time.sleep(0.5)  # A's next batch after B's attempt
    stop.touch()
    a.wait()
    opened = b.events("open")
    assert not opened, f"B took over the live writer A from another pid namespace (epoch {opened[0]['epoch']}); expected ConcurrentWriterError"
    assert [e["error"] for e in b.events("error")] == ["ConcurrentWriterError"], b.output()
    assert_no_errors(a, "the live writer was disturbed by the second one")
    assert_rows_once(root, a, b)
