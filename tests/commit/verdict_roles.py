"""The parties of the attempt-verdict scenarios, one per process (``python -m tests.commit.verdict_roles ROLE ROOT [ARG]``).

Each role prints ``<label>: <value>`` lines the test reads. Freezing is real: a role stops
itself with SIGSTOP (the library's own pause points, or a patched call for points the library
has no name for) and the test resumes it with SIGCONT.

Roles:
  zombie MODE        A: opens, stages batch 0, freezes before its WAL claim; on resume claims
                     late and must be fenced.
  gc [TIMES]         ``seo gc`` with no age limit (it aborts the zombie's staging as stale),
                     TIMES runs one after the other (default 1).
  takeover           opens (recovery included) and closes.
  frozen WHERE       F: opens, freezes inside its recovery - before it lists the WAL
                     ('before-listing') or after the listing, before its first verdict
                     ('before-verdict') - then carries on with what it saw.
  rollforward CRASH  S: opens and is SIGKILLed at CRASH inside the roll-forward (or 'none').
  final MODE         T: opens, commits Spark batch 0 again if it is not committed (Spark re-runs
                     an uncommitted batch), and prints what a reader sees.
  claimer MODE [group]
                     A: opens, commits Spark batch 0 and freezes after its post-claim fence check,
                     right before it publishes; on resume it completes the batch.
  stale WHERE MODE [group]
                     R: opens with a freeze inside its recovery - before it lists the WAL
                     ('before-listing') or right after ('after-listing') - then commits Spark
                     batch 1 and prints every row a reader sees.
  paused MODE PAUSE  commits Spark batch 0 and freezes at PAUSE (the test kills it there).
  stalediscard       opens; its recovery freezes right before it deletes a void claim's WAL entry.
  crasher CRASH MODE commits Spark batch 0 and is SIGKILLed at CRASH.
  discard FREEZE     ``seo recover --discard-wal 0``, optionally frozen ('freeze') before its verdict.
"""

from __future__ import annotations

import signal
import sys
import threading

from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
from streaming_exactly_once.errors import WriterFencedError
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import with_faults
from tests.commit.helpers import stage_and_commit, visible_rows

Q = "11111111-1111-1111-1111-111111111111"
LEASE_MS = 1500
ROWS = list(range(10))


def say(label: str, value: object) -> None:
    print(f"{label}: {value}", flush=True)


def make_committer(storage, *, heartbeat: bool = False) -> TableCommitter:
    options = CommitterOptions(heartbeat=heartbeat, lease_timeout_ms=LEASE_MS)
    return TableCommitter(storage, options)


def freeze() -> None:
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)  # the calling thread stops at once


def zombie(root: str, mode: str) -> None:
    c = make_committer(with_faults(open_storage(root), pause_at="before-wal"), heartbeat=True)
    c.open()
    try:
        stage_and_commit(c, Q, 0, ROWS, mode=mode)
        say("zombie", "committed")
    except WriterFencedError:
        say("zombie", "fenced")


def gc(root: str, times: str = "1") -> None:
    from streaming_exactly_once.maintenance.gc import collect_garbage

    for _ in range(int(times)):  # each run takes the lease over from the one before
        report = collect_garbage(open_storage(root), older_than_ms=0, lease_timeout_ms=LEASE_MS)
        say("gc aborted", len(report.staging))


def takeover(root: str) -> None:
    c = make_committer(open_storage(root))
    say("takeover", c.open())
    c.close()


def frozen(root: str, where: str) -> None:
    import streaming_exactly_once.commit.protocol.recovery as recovery
    from streaming_exactly_once.commit.protocol.wal import CommitSequenceStore

    if where == "before-listing":
        listing = CommitSequenceStore.pending
        CommitSequenceStore.pending = lambda self: (freeze(), listing(self))[1]  # type: ignore[method-assign]
    else:
        first = recovery.decide
        calls = []

        def decide_after_a_nap(*args, **kwargs):
            if not calls:
                calls.append(1)
                freeze()
            return first(*args, **kwargs)

        recovery.decide = decide_after_a_nap
    c = make_committer(open_storage(root), heartbeat=True)
    try:
        say("frozen", c.open())
    except WriterFencedError:
        say("frozen", "fenced")


def rollforward(root: str, crash: str) -> None:
    c = make_committer(with_faults(open_storage(root), crash_at=None if crash == "none" else crash))
    say("rollforward", c.open())
    c.close()


def final(root: str, mode: str) -> None:
    storage = open_storage(root)
    c = make_committer(storage)
    say("recovery", c.open())
    say("batch 0 committed before", c.is_committed(Q, 0))
    stage_and_commit(c, Q, 0, ROWS, mode=mode)
    c.close()
    say("rows", visible_rows(storage))


def make_group(storage, *, heartbeat: bool = False):
    from streaming_exactly_once.commit.groups.group_committer import GroupCommitter

    options = CommitterOptions(heartbeat=heartbeat, lease_timeout_ms=LEASE_MS)
    return GroupCommitter(storage, options)


GROUP_TABLES = ("orders", "payments")


def commit_group(g, spark_batch: int, rows: list[int]):
    """One group batch: the rows split over two tables, one text file each (as ``stage_and_commit``)."""
    from streaming_exactly_once.checkpoint.reader import InputFile
    from streaming_exactly_once.commit.committer import StagedFile
    from streaming_exactly_once.commit.groups.group_committer import MemberBatch

    g.ensure_open()
    if g.is_committed(Q, spark_batch):
        return None
    attempt = g.begin(Q, spark_batch, mode="rename")
    try:
        members = []
        for i, table in enumerate(GROUP_TABLES):
            part = rows[i :: len(GROUP_TABLES)]
            final = f"p=a/part-{table}-{spark_batch:05d}-{attempt.attempt}.txt"
            staged = f"{attempt.staging_dir}/data/{table}/{final}"
            g.storage.put_if_absent(staged, ",".join(map(str, part)).encode())
            info = g.storage.info(staged)
            members.append(MemberBatch(table=table, files=[StagedFile(final, info.size, info.mtime_ms, staged)], rows=len(part), format="parquet"))
        inputs = [InputFile(source=0, path=f"file:///in/{Q[:4]}-{spark_batch}.csv", timestamp=1)]
        return g.commit_group(attempt, members, input_files=inputs)
    except BaseException:
        g.abort(attempt)
        g.invalidate()
        raise


def rows_seen(root: str, group: bool) -> list[int]:
    if not group:
        return visible_rows(open_storage(root))
    return sorted(r for t in GROUP_TABLES for r in visible_rows(open_storage(f"{root}/{t}")))


def claimer(root: str, mode: str, group: str = "") -> None:
    from streaming_exactly_once.commit.protocol import steps

    storage = open_storage(root)
    if mode == "rename":
        storage = with_faults(storage, pause_at="after-move")
    else:
        publish = steps.PublishManifest.execute
        steps.PublishManifest.execute = lambda self, ctx: (freeze(), publish(self, ctx))[1]  # type: ignore[method-assign]
    c = make_group(storage, heartbeat=True) if group else make_committer(storage, heartbeat=True)
    c.open()
    try:
        result = commit_group(c, 0, ROWS) if group else stage_and_commit(c, Q, 0, ROWS, mode=mode)
        say("claimer", f"{result.status} as batch {result.batch_id}")
    except WriterFencedError:
        say("claimer", "fenced")  # its claim is left to the recoverer


def paused(root: str, mode: str, pause: str) -> None:
    c = make_committer(with_faults(open_storage(root), pause_at=pause))
    c.open()
    stage_and_commit(c, Q, 0, ROWS, mode=mode)


def stalediscard(root: str) -> None:
    """Opens; its recovery freezes in the middle of discarding a void claim (checks passed)."""
    from streaming_exactly_once.commit.protocol.wal import CommitSequenceStore

    delete = CommitSequenceStore.delete
    CommitSequenceStore.delete = lambda self, *a, **k: (freeze(), delete(self, *a, **k))[1]  # type: ignore[method-assign]
    c = make_committer(open_storage(root), heartbeat=True)
    try:
        say("stalediscard", c.open())
    except WriterFencedError:
        say("stalediscard", "fenced")


def crasher(root: str, crash: str, mode: str) -> None:
    c = make_committer(with_faults(open_storage(root), crash_at=crash))
    c.open()
    stage_and_commit(c, Q, 0, ROWS, mode=mode)


def stale(root: str, where: str, mode: str, group: str = "") -> None:
    from streaming_exactly_once.commit.protocol.wal import CommitSequenceStore

    listing = CommitSequenceStore.pending
    calls: list[int] = []

    def pending(self):
        first = not calls
        calls.append(1)
        if first and where == "before-listing":
            freeze()
        found = listing(self)
        if first and where == "after-listing":
            freeze()
        return found

    CommitSequenceStore.pending = pending  # type: ignore[method-assign]
    storage = open_storage(root)
    c = make_group(storage, heartbeat=True) if group else make_committer(storage, heartbeat=True)
    say("stale", c.open())
    more = list(range(10, 20))
    result = commit_group(c, 1, more) if group else stage_and_commit(c, Q, 1, more, mode=mode)
    say("batch 1", f"{result.status} as batch {result.batch_id}")
    c.close()
    again = make_group(storage) if group else make_committer(storage)
    say("reopened", again.open())
    again.close()
    say("rows", rows_seen(root, bool(group)))


def discard(root: str, when: str) -> None:
    import streaming_exactly_once.maintenance.repair as repair

    if when == "freeze":  # after every check, right before it deletes
        discard_files = repair.discard_sequence
        repair.discard_sequence = lambda *a, **k: (freeze(), discard_files(*a, **k))[1]
    try:
        say("discard", repair.discard_wal(open_storage(root), 0, lease_timeout_ms=LEASE_MS))
    except Exception as exc:  # noqa: BLE001 - the test reads the refusal
        say("discard raised", f"{type(exc).__name__}: {exc}".replace("\n", " "))


if __name__ == "__main__":
    from streaming_exactly_once.testing.lease_clock import install_from_env

    install_from_env()  # the test's shared lease clock
    role, root, *rest = sys.argv[1:]
    {
        "zombie": zombie,
        "gc": gc,
        "takeover": takeover,
        "frozen": frozen,
        "rollforward": rollforward,
        "final": final,
        "claimer": claimer,
        "crasher": crasher,
        "paused": paused,
        "stalediscard": stalediscard,
        "stale": stale,
        "discard": discard,
    }[role](root, *rest)
