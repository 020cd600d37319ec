"""The query's life in a driver process of its own: ``kill -9`` at a commit boundary or at a random
moment (the torture harness's way: ``SEO_CRASH_AT``, ``harness.kill_group``).

A killed run acknowledged nothing the readers have not seen: the model only learns that the
Kafka offsets it may have read go up to the partitions' ends at its start, and the next run (or
the drain) must leave every record there once.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tests.explorer import runs
from tests.explorer.outcome import classify
from tests.torture.harness import REPO, TortureRun, clear_unstarted_checkpoint, kill_group

if TYPE_CHECKING:
    from tests.explorer.interpreter import Interpreter

DRIVER_TIMEOUT_S = 300.0


#: a driver process started ahead of need, its SparkSession up (``driver --wait``): a kill's
#: driver then costs its query, not a JVM start (about half of a program's time before)
_spare: subprocess.Popen | None = None


def _popen(args: list[str], env_extra: dict[str, str]) -> subprocess.Popen:
    env = dict(os.environ)
    for key in ("SEO_CRASH_AT", "SEO_FAIL_AT", "SEO_PAUSE_AT"):
        env.pop(key, None)
    env.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' pyspark-shell")
    env.update(env_extra)
    cmd = [sys.executable, "-m", "tests.explorer.driver", *args]
    stdin = subprocess.PIPE if args == ["--wait"] else subprocess.DEVNULL
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def prewarm(it: Interpreter) -> None:
    """Start a spare driver when an action after the current step runs one (a kill or a frozen
    writer, not in a Spark Connect program); it warms up while the steps before it run."""
    global _spare
    later = it.program.actions[it.step :]
    if it.setup.connect or not any(a.kind in ("kill", "zombie") for a in later):
        return
    if _spare is None or _spare.poll() is not None:
        _spare = _popen(["--wait"], {})
        atexit.register(_drop_spare)


def _drop_spare() -> None:
    global _spare
    if _spare is not None:
        kill_group(_spare)
        _spare.wait()
        _spare = None


def launch(it: Interpreter, spec: runs.RunSpec, env_extra: dict[str, str]) -> subprocess.Popen:
    global _spare
    path = it.work / f"spec-{it.step}.json"
    path.write_text(spec.dumps())
    proc, _spare = (_spare, None) if _spare is not None and _spare.poll() is None and not spec.connect else (None, _spare)
    if proc is None:
        proc = _popen([str(path)], env_extra)
    else:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"spec": str(path), "env": env_extra}) + "\n")
        proc.stdin.close()
    prewarm(it)
    return proc


def drive(it: Interpreter, spec: runs.RunSpec, env: dict[str, str], *, delay: float | None = None) -> tuple[int | None, str]:
    """Run the query in a driver process to its end, or kill it ``delay`` seconds after it
    started; returns its exit code (None: it hung and was killed) and its output."""
    runs.close_sink(it)  # this process lets the table go: the driver takes it at once
    with it.timed("driver"):
        return _drive(it, spec, env, delay)


def _drive(it: Interpreter, spec: runs.RunSpec, env: dict[str, str], delay: float | None) -> tuple[int | None, str]:
    proc = launch(it, spec, env)
    try:
        lines = TortureRun.wait_started(proc, DRIVER_TIMEOUT_S if delay is not None else 0)  # its pump drains the pipe
        if delay is not None:
            if lines and lines[-1].startswith("STARTED"):
                time.sleep(delay)
            kill_group(proc)
        code: int | None = proc.wait(timeout=DRIVER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        kill_group(proc)
        proc.wait()
    proc._seo_pump.join(timeout=10)  # type: ignore[attr-defined]
    return code, "".join(proc._seo_lines)  # type: ignore[attr-defined]


def outcome_of(code: int | None, output: str) -> str:
    if code == 0:
        return "ok"
    if code is None:
        return "error:the driver did not finish in time"
    if code < 0:
        return "killed"
    if "REFUSED " in output:
        return output.split("REFUSED ", 1)[1].splitlines()[0].strip()
    return classify(output[-3000:])


def run_in_driver(it: Interpreter, spec: runs.RunSpec, fail_at: str | None) -> str:
    """A run of a Spark Connect program: its own driver process, a Connect client."""
    code, output = drive(it, spec, {"SEO_FAIL_AT": fail_at} if fail_at else {})
    outcome = outcome_of(code, output)
    if outcome.startswith("error:"):
        it.last_error = output[-3000:]
    return outcome


def kill(it: Interpreter, boundary: str | None, *, delay: float | None = None) -> None:
    """One run of the query in a driver process, killed at ``boundary`` (``SEO_CRASH_AT``) or
    ``delay`` seconds after it started; a run that ends before either is a clean run."""
    spec = runs.spec_of(it)
    if spec.starting == "table":
        spec = runs._resolve_table_start(it, spec)
    expectation = runs.expect(it, spec)
    if expectation.must_refuse:
        it.say(f"    (no kill: the run must be refused first: {expectation.reasons})")
        runs.run_query(it, sink="new")
        return
    ends = runs.kafka_ends(it)
    pending = runs.has_pending_batch(it.checkpoint) and not spec.endless
    batches = runs.table_batches(it)
    runs.recreated(it, spec)
    code, output = drive(it, spec, {"SEO_CRASH_AT": boundary} if boundary else {}, delay=None if boundary else (delay or 1.0))
    label = boundary or f"random {delay}s"
    if code is None or code >= 0:
        ended_before(it, Before(spec, ends, pending, batches, expectation), code, output, f"driver ended before {label}")
        return
    learn_run(it, spec)
    it.result.kills += 1
    it.feature("life:kill", f"kill:{(boundary or 'random').split('@')[0].split('+')[0]}")
    it.model.settled = False
    it.interrupted = True
    it.marks.attempt(ends)
    it.say(f"    killed at {label}")


@dataclass(frozen=True)
class Before:
    """What the model knew before a driver's run: a run that ends on its own is judged by it."""

    spec: runs.RunSpec
    ends: dict[str, int]
    pending: bool
    batches: list[int]
    expectation: runs.Expectation

    @staticmethod
    def of(it: Interpreter, spec: runs.RunSpec) -> Before:
        pending = runs.has_pending_batch(it.checkpoint) and not spec.endless
        return Before(spec, runs.kafka_ends(it), pending, runs.table_batches(it), runs.expect(it, spec))


def learn_run(it: Interpreter, spec: runs.RunSpec) -> None:
    """What a driver's run left, killed or not: the rate rows it made, its checkpoint."""
    it.runs += 1
    runs.learn_rate(it, spec)
    runs.note_created(it)
    if clear_unstarted_checkpoint(it.checkpoint):
        it.say("    deleted the checkpoint: the kill left only a temp file of its first offsets")
    it.query.fresh = not runs._has_offsets(it.checkpoint)


def ended_before(it: Interpreter, before: Before, code: int | None, output: str, said: str) -> None:
    """A driver's run that ended on its own before its kill or freeze: a clean run, judged as one
    (its rows are acknowledged, a refusal must be one its expectation allows)."""
    learn_run(it, before.spec)
    outcome = outcome_of(code, output)
    it.say(f"    {said}: {outcome}")
    if code is None:
        it.fail("driver-hang", "driver", f"no exit in {DRIVER_TIMEOUT_S}s: {output[-1500:]}")
    elif outcome == "ok":
        runs.after_success(it, before.spec, before.ends, settled=not before.pending, wrote=runs.table_batches(it) != before.batches)
    elif before.expectation.admits(outcome):
        it.model.settled = False
        it.marks.attempt(before.ends)
        runs.remedy(it, outcome)
    else:
        allowed = sorted(before.expectation.allowed)
        it.fail("unexpected-refusal", "driver", f"{outcome}; allowed {allowed}: {output[-1500:]}")


#: boundaries after which the frozen writer had claimed its batch: woken, it may finish that
#: batch (the successor completed it for it) and then stop at Spark's own guard on the shared
#: checkpoint instead of at the fence
class _NeverReached(Exception):
    """The frozen driver's run ended before its boundary."""


#: boundaries in a writer's background work (a compaction's rewrite): woken with no batch left
#: to run, its query ends as usual; what it prepared is refused by the successor's verdict
BACKGROUND = ("after-rewrite",)
#: boundaries after a batch's commit record (its records' deferred sync, the claim's delete):
#: woken with no batch left, its query ends as usual (exit 0) having published nothing - the
#: same judgement
FINISHED = ("after-records-sync", "after-wal-delete")
UNCLAIMED = ("before-stage", "after-stage", "after-intent", "before-wal", "after-rewrite")
LEASE_S = 3.0


def zombie(it: Interpreter, boundary: str) -> None:
    """A driver frozen (``SIGSTOP``) at ``boundary``; after its lease expired, a successor - a
    run in this process on the same checkpoint - takes the table and runs to the end; then the
    frozen driver is woken (``SIGCONT``). It must stop without publishing: fenced
    (``WriterFencedError``), or at Spark's guard of the checkpoint the successor moved on."""
    spec = runs.spec_of(it)
    if spec.starting == "table":
        spec = runs._resolve_table_start(it, spec)
    if runs.expect(it, spec).must_refuse:
        it.say("    (no zombie: the run must be refused first)")
        return
    before = Before.of(it, spec)
    runs.recreated(it, spec)
    runs.close_sink(it)
    with it.timed("zombie"):
        _zombie(it, before, boundary)


def _zombie(it: Interpreter, before: Before, boundary: str) -> None:
    from tests.torture.harness import process_state

    spec, ends = before.spec, before.ends
    proc = launch(it, spec, {"SEO_PAUSE_AT": boundary})
    reached = False
    before_wake: list[int] | None = None
    successor = ""
    try:
        TortureRun.wait_started(proc, 0)
        deadline = time.time() + DRIVER_TIMEOUT_S
        while proc.poll() is None and process_state(proc.pid) != "T" and time.time() < deadline:
            time.sleep(0.2)
        reached = proc.poll() is None and process_state(proc.pid) == "T"
        if not reached:  # it ran to its end (or hung): a run like any other
            code = proc.poll()
            raise _NeverReached
        it.marks.attempt(ends)
        it.model.settled = False
        time.sleep(LEASE_S + 1)  # its heartbeat stopped with it: the lease expires
        it.say(f"    frozen at {boundary}; a successor takes over")
        successor = runs.run_query(it, sink="new")
        before_wake = runs.table_batches(it)
        os.kill(proc.pid, signal.SIGCONT)
        code = proc.wait(timeout=DRIVER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        code = None
    except _NeverReached:
        pass
    finally:
        kill_group(proc)
        proc.wait()
    proc._seo_pump.join(timeout=10)  # type: ignore[attr-defined]
    output = "".join(proc._seo_lines)  # type: ignore[attr-defined]
    if not reached:
        ended_before(it, before, code, output, f"the driver never reached {boundary}")
        return
    it.feature("life:zombie", f"zombie:{boundary.split('@')[0]}")
    fenced = "WriterFencedError" in output
    guarded = "CONCURRENT_STREAM_LOG_UPDATE" in output or "concurrently using" in output
    claimed = boundary.split("@")[0] not in UNCLAIMED
    it.say(f"    the woken zombie ended with {code}: {'fenced' if fenced else 'checkpoint guard' if guarded else '?'}")
    if code == 0 and boundary.split("@")[0] in BACKGROUND + FINISHED and runs.table_batches(it) == before_wake:
        it.say("    (frozen after its batch or in background work, it had no batch left to run: its query ended and published nothing)")
        return
    if successor.startswith("env:") and not fenced:  # no takeover happened: the zombie may finish
        it.fail("environment", "driver", f"the successor failed for the machine's reasons ({successor}); woken, the zombie ended with {code}")
        return
    if code is None or code == 0 or not (fenced or (claimed and guarded)):
        it.fail("zombie-not-fenced", "driver", f"frozen at {boundary}, woken after the takeover: exit {code}\n{output[-2000:]}")
