"""Runs a program: each action against real Spark and the real table, then every reader checked.

``Interpreter.execute`` runs the actions in order, checks the table after each
(``tests.explorer.checks``), and ends with a *drain* - a clean run that must leave every eligible
record in the table once - and ``seo verify``. It stops at the first failed check: the
program's result lists that failure, the features the program exercised and its transcript.
"""

from __future__ import annotations

import contextlib
import logging
import random
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tests.explorer import checks, lifecycle, maintenance, runs
from tests.explorer.model import Failure, Model
from tests.explorer.program import Action, Program
from tests.explorer.state import KafkaMarks, QueryState, TableState
from tests.explorer.tables import POISON_V
from tests.explorer.world import TOPICS, World


@dataclass
class ProgramResult:
    program: Program
    failures: list[Failure] = field(default_factory=list)
    features: set[str] = field(default_factory=set)
    transcript: list[str] = field(default_factory=list)
    steps: int = 0
    kills: int = 0
    wall_s: float = 0.0
    #: wall seconds by phase (``Interpreter.timed``): where a program's time goes
    phases: Counter = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def signature(self) -> str | None:
        return self.failures[0].signature if self.failures else None

    @property
    def inconclusive(self) -> bool:
        """It failed for the machine's reasons (Spark's Python workers not starting in time)."""
        return bool(self.failures) and self.failures[0].kind == "environment"


class Interpreter:
    def __init__(self, program: Program, spark: Any, work: Path, *, log: bool = False) -> None:
        self.program = program
        self.spark = spark
        self.work = work
        self.rng = random.Random(program.seed)
        self.world = World(work, self.rng)
        self.setup = program.setup
        self.model = Model(self.world, filter=program.setup.filter)
        self.query = QueryState(fail_on_data_loss=program.setup.fail_on_data_loss, gate=program.setup.gate)
        self.table = TableState()
        self.marks = KafkaMarks()
        self.result = ProgramResult(program)
        self.sink: Any = None
        self.sink_options: dict[str, Any] | None = None
        self.step = 0
        self.runs = 0
        #: an option changed since the last run (recorded as allowed or refused at the next)
        self.pending_change: str | None = None
        #: the text of the last run's error the explorer could not classify
        self.last_error = ""
        #: Kafka topics deleted and recreated since the last run read them (``runs.recreated``)
        self.recreated: set[str] = set()
        self.marks_before_reset: dict[str, int] = {}
        #: a run was killed or failed since the last run that ended ok: a writer's open may
        #: complete its decided batch (``runs._unchanged_by_refusal``)
        self.interrupted = False
        #: copies of the checkpoint taken after each run: (checkpoint number, path), oldest first
        self.checkpoint_copies: list[tuple[int, Path]] = []
        #: the checkpoint was put back to an older copy since the last run (``runs.expect``)
        self.restored = False
        self.downstream = checks.Downstream(work / "downstream-checkpoint", program.setup.downstream_max_files) if program.setup.downstream else None
        self.checker = checks.Checker(self)
        self._log = log

    # -- the program -----------------------------------------------------------------------

    def execute(self) -> ProgramResult:
        t0 = time.time()
        library_log = logging.getLogger("streaming_exactly_once")
        level = library_log.level
        library_log.setLevel(logging.CRITICAL)  # the program's own log says what happened; put back after
        try:
            lifecycle.prewarm(self)
            if self.setup.foreign_files:
                self.checker.foreign_files()
            for action in self.program.actions:
                self.step += 1
                self.say(f"{self.step:2d}. {action.describe()}")
                t_act = time.time()
                self.act(action)
                if self.result.failures:
                    break
                t_check = time.time()
                with self.timed("checks"):
                    self.fail_with(self.checker.after_step(full=action.kind in ("maintain", "lose_checkpoint")))
                self.say(f"    ({t_check - t_act:.1f}s + checks {time.time() - t_check:.1f}s)")
                if self.result.failures:
                    break
            if not self.result.failures:
                self.step += 1
                self.say(f"{self.step:2d}. (drain)")
                with self.timed("drain"):
                    self.drain()
        except Exception as exc:  # the explorer's own failure: reported, never swallowed
            import traceback

            self.fail("explorer-error", type(exc).__name__, traceback.format_exc()[-1500:])
        finally:
            self.close()
            library_log.setLevel(level)
        self.result.steps = self.step
        self.result.wall_s = time.time() - t0
        return self.result

    def act(self, action: Action) -> None:
        handler = getattr(self, f"do_{action.kind}", None)
        if handler is None:
            raise ValueError(f"unknown action {action.kind!r}")
        handler(action)
        if action.kind in ("run", "kill", "fail", "zombie") and self.checkpoint.is_dir():
            copy = self.work / "checkpoint-copies" / str(len(self.checkpoint_copies))
            shutil.copytree(self.checkpoint, copy)
            self.checkpoint_copies.append((self.query.checkpoint, copy))

    def drain(self) -> None:
        """The end of every program: the user fixes what was refused and runs the query to the
        end of its input; then every record must be there once, and ``seo verify`` clean."""
        if self.downstream is not None:
            self.downstream.paused = False
        outcomes = []
        for _attempt in range(5):
            outcome = runs.run_query(self, sink="new", drain=True)
            outcomes.append(outcome)
            if outcome == "ok" and self.model.settled:
                break
            if self.result.failures:
                return
        else:  # after a run the machine failed (outcome.ENVIRONMENT), the program is inconclusive
            machine = any(o.startswith("env:") for o in outcomes)
            self.fail("environment" if machine else "drain", "run", f"the drain could not finish: {', '.join(outcomes)}")
            return
        self.fail_with(self.checker.after_step(full=True, complete=True))
        if not self.result.failures:
            self.fail_with(maintenance.verify_clean(self))
        if not self.result.failures:
            self.fail_with(maintenance.audit_clean(self))

    def close(self) -> None:
        runs.close_sink(self)

    # -- reporting -------------------------------------------------------------------------

    def say(self, text: str) -> None:
        self.result.transcript.append(text)
        if self._log:
            print(f"[explore {self.program.seed}] {text}", flush=True)

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Adds the wall time of the block to ``phase`` (a phase inside another counts in both)."""
        t0 = time.time()
        try:
            yield
        finally:
            self.result.phases[phase] += time.time() - t0

    def feature(self, *names: str) -> None:
        self.result.features.update(names)

    def fail(self, kind: str, reader: str, detail: str) -> None:
        self.result.failures.append(Failure(kind, reader, detail, self.step))
        self.say(f"    FAILED {kind} ({reader}): {detail[:300]}")

    def fail_with(self, failures: list[Failure]) -> None:
        for f in failures:
            self.result.failures.append(f)
            self.say(f"    FAILED {f.kind} ({f.reader}): {f.detail[:300]}")

    # -- paths -----------------------------------------------------------------------------

    @property
    def checkpoint(self) -> Path:
        return self.work / f"checkpoint-{self.query.checkpoint}"

    def new_checkpoint(self, start: str) -> None:
        self.query = replace(self.query, checkpoint=self.query.checkpoint + 1, fresh=True, start=start, rate_gen=self.query.rate_gen + 1)
        self.restored = False

    # -- actions: input --------------------------------------------------------------------

    def do_produce(self, action: Action) -> None:
        """New records; ``bad`` of them fail a group's row check, ``poison`` its gate."""
        made = 0
        special = [-1 - self.rng.randrange(999) for _ in range(action.arg("bad", 0))]
        special += [POISON_V + self.rng.randrange(999) for _ in range(action.arg("poison", 0))]
        if "files" in self.setup.sources:
            for _ in range(action.arg("files", 1)):
                made += len(self.world.write_file(action.arg("rows", 4), special))
                special = []
        if "kafka" in self.setup.sources:
            n = action.arg("kafka", 4)
            parts = [(t, p) for t in TOPICS for p in range(self.world.partitions.get(t, 0))]
            for i in range(n):
                made += len(self.world.produce(*parts[i % len(parts)], 1, special[:1]))
                special = special[1:]
        if made:
            self.model.settled = False
        self.say(f"    {made} records")

    def do_kafka(self, action: Action) -> None:
        """A change on the Kafka side: a partition added, a topic created, records expired."""
        if "kafka" not in self.setup.sources:
            return
        op = action.arg("op")
        if op == "grow":
            topic = action.arg("topic", "a")
            self.world.produce(topic, self.world.partitions.get(topic, 0), 2)
            self.model.settled = False
            self.feature("kafka:grow-partition")
        elif op in ("expire-read", "expire-unread"):
            self.expire(read_only=op == "expire-read")
        elif op == "recreate":
            topic = action.arg("topic", "a")
            if topic not in self.world.partitions:
                return
            # the deleted topic's records no query read are gone with it (docs/kafka.md)
            unread = {r.id for p in range(self.world.partitions[topic]) for r in self.world.kafka_records(topic, p)} - self.model.ack
            self.model.lost_ok |= unread
            self.world.recreate_topic(topic)
            self.world.produce(topic, 0, 3)
            self.recreated.add(topic)
            for tp in [tp for tp in self.marks.lo if tp.startswith(f"{topic}/")]:
                self.marks_before_reset[tp] = self.marks.hi.get(tp, 0)
                self.marks.lo[tp] = self.marks.hi[tp] = 0
            self.model.settled = False
            self.feature("kafka:recreate-topic")
            self.say(f"    topic {topic} deleted and created again (offsets restart at 0)")

    def expire(self, *, read_only: bool) -> None:
        """Retention deletes a partition's oldest records: only records the table holds
        (``read_only``), or unread ones too (those may then never arrive)."""
        for topic, count in sorted(self.world.partitions.items()):
            for p in range(count):
                records = self.world.kafka_records(topic, p)
                if read_only:
                    held = [r for r in records if r.id in self.model.ack]
                    below = held[-1].offset + 1 if held and held[-1].offset is not None else 0
                    below = min(below, len(records) // 2 + 1) if below else 0
                else:
                    below = len(records) // 2 + 1 if records else 0
                if below <= self.world.earliest_offset(topic, p):
                    continue
                gone = self.world.expire(topic, p, below)
                self.model.lost_ok |= {r.id for r in gone if r.id not in self.model.ack}
                self.feature("kafka:expire")
                self.say(f"    {topic}/{p}: records below {below} expired")

    # -- actions: the query's life ---------------------------------------------------------

    def do_run(self, action: Action) -> None:
        runs.run_query(self, sink=action.arg("sink", "new"), max_files=action.arg("max_files", 2))

    def do_fail(self, action: Action) -> None:
        runs.run_query(self, sink="new", fail_at=action.arg("boundary"))

    def do_kill(self, action: Action) -> None:
        lifecycle.kill(self, action.arg("boundary"), delay=action.arg("delay"))

    def do_zombie(self, action: Action) -> None:
        lifecycle.zombie(self, action.arg("boundary"))

    def do_lose_checkpoint(self, action: Action) -> None:
        if self.query.fresh:
            return
        shutil.rmtree(self.checkpoint, ignore_errors=True)
        self.new_checkpoint(action.arg("start", "earliest"))
        self.feature(f"life:lost-checkpoint-{self.query.start}")

    def do_restore_checkpoint(self, action: Action) -> None:
        """The checkpoint is put back to the copy taken ``back`` runs before the last one (a
        backup restored, a volume snapshot rolled back): the query re-plans batch ids the table
        holds with what arrived since - refused (``CheckpointRewoundError``) or, when it plans
        them as before, skipped (docs/operations.md)."""
        own = [path for number, path in self.checkpoint_copies if number == self.query.checkpoint]
        back = int(action.arg("back", 1))
        if len(own) <= back:
            return
        shutil.rmtree(self.checkpoint, ignore_errors=True)
        shutil.copytree(own[-1 - back], self.checkpoint)
        self.restored = True
        self.feature("life:restored-checkpoint")
        self.say(f"    checkpoint put back to its copy of {back} run(s) before the last")

    def do_replay(self, action: Action) -> None:
        """Spark's last ``commits/N`` goes: the query replays a batch the table committed."""
        commits = self.checkpoint / "commits"
        ids = sorted(int(n.name) for n in commits.iterdir() if n.name.isdigit()) if commits.is_dir() else []
        if not ids:
            return
        (commits / str(ids[-1])).unlink()
        crc = commits / f".{ids[-1]}.crc"
        if crc.exists():
            crc.unlink()
        self.feature("life:replay")
        self.say(f"    deleted commits/{ids[-1]}")

    def do_downstream_fail(self, action: Action) -> None:
        """The downstream query's next batch fails after Spark planned it (``offsets/N`` and its
        file-source log written, ``commits/N`` not): maintenance that follows must leave that
        batch's files for its restart, which reads them by path."""
        if self.downstream is not None:
            self.downstream.fail_next = True
            self.downstream.fail_after = action.arg("after", 0)
            self.downstream.paused = False

    def do_downstream_resume(self, action: Action) -> None:
        if self.downstream is not None:
            self.downstream.paused = False

    def do_downstream_pause(self, action: Action) -> None:
        """The downstream query stops (no catch-up after the steps that follow) until its next
        ``downstream_fail``, ``downstream_resume`` or the drain: it falls behind the table."""
        if self.downstream is not None:
            self.downstream.paused = True

    def do_idle(self, action: Action) -> None:
        with self.timed("idle"):
            time.sleep(float(action.arg("seconds", 2)))
        self.feature("life:idle")

    # -- actions: changes ------------------------------------------------------------------

    def do_change(self, action: Action) -> None:
        """An option changed for the next run (some a table refuses: ``FIXED_OPTIONS``)."""
        option, value = action.arg("option"), action.arg("value")
        if option == "format" and value == self.setup.format:
            return
        self.setup = replace(self.setup, **{option: value})
        self.pending_change = option
        self.say(f"    {option} = {value}")

    def do_evolve(self, action: Action) -> None:
        """The user changes the query's projection."""
        kind = action.arg("kind")
        q = self.query
        if kind == "add":
            self.query = replace(q, extra_columns=q.extra_columns + 1)
        elif kind == "widen":
            self.query = replace(q, widen=True)
        elif kind == "drop_offsets" and "kafka" in self.setup.sources:
            self.query = replace(q, drop_offsets=True)
        elif kind == "keep_offsets":
            self.query = replace(q, drop_offsets=False)

    def do_maintain(self, action: Action) -> None:
        maintenance.command(self, action.arg("cmd"))
