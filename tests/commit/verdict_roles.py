"""The parties of the attempt-verdict scenarios, one per process (``python -m tests.commit.verdict_roles ROLE ROOT [ARG]``).

Each role prints ``<label>: <value>`` lines the test reads. Freezing is real: a role stops
itself with SIGSTOP (the library's own pause points, or a patched call for points the library
has no name for) and the test resumes it with SIGCONT.

Roles:
  zombie MODE        A: opens, stages batch 0, freezes before its WAL claim; on resume claims
                     late and must be fenced.
  gc                 ``seo gc`` with no age limit (it aborts the zombie's staging as stale).
  takeover           opens (recovery included) and closes.
  frozen WHERE       F: opens, freezes inside its recovery - before it lists the WAL
                     ('before-listing') or after the listing, before its first verdict
                     ('before-verdict') - then carries on with what it saw.
  rollforward CRASH  S: opens and is SIGKILLed at CRASH inside the roll-forward (or 'none').
  final MODE         T: opens, commits Spark batch 0 again if it is not committed (Spark re-runs
                     an uncommitted batch), and prints what a reader sees.
"""

from __future__ import annotations

import os
import signal
import sys

from streaming_exactly_once.commit.faults import FaultHooks, FaultSpec
from streaming_exactly_once.errors import WriterFencedError
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
from tests.commit.helpers import stage_and_commit, visible_rows

Q = "11111111-1111-1111-1111-111111111111"
LEASE_MS = 1500
ROWS = list(range(10))


def say(label: str, value: object) -> None:
    print(f"{label}: {value}", flush=True)


def make_committer(storage, *, heartbeat: bool = False, faults: FaultHooks | None = None) -> TableCommitter:
    options = CommitterOptions(heartbeat=heartbeat, lease_timeout_ms=LEASE_MS)
    return TableCommitter(storage, options, faults=faults or FaultHooks())


def freeze() -> None:
    os.kill(os.getpid(), signal.SIGSTOP)


def zombie(root: str, mode: str) -> None:
    c = make_committer(open_storage(root), heartbeat=True, faults=FaultHooks(pause_at=FaultSpec.parse("before-wal")))
    c.open()
    try:
        stage_and_commit(c, Q, 0, ROWS, mode=mode)
        say("zombie", "committed")
    except WriterFencedError:
        say("zombie", "fenced")


def gc(root: str) -> None:
    from streaming_exactly_once.maintenance.gc import collect_garbage

    report = collect_garbage(open_storage(root), older_than_ms=0, lease_timeout_ms=LEASE_MS)
    say("gc aborted", len(report.staging))


def takeover(root: str) -> None:
    c = make_committer(open_storage(root))
    say("takeover", c.open())
    c.close()


def frozen(root: str, where: str) -> None:
    import streaming_exactly_once.commit.recovery as recovery
    from streaming_exactly_once.commit.wal import CommitSequenceStore

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
    c = make_committer(open_storage(root), faults=FaultHooks(crash_at=FaultSpec.parse(None if crash == "none" else crash)))
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


if __name__ == "__main__":
    role, root, *rest = sys.argv[1:]
    {"zombie": zombie, "gc": gc, "takeover": takeover, "frozen": frozen, "rollforward": rollforward, "final": final}[role](root, *rest)
