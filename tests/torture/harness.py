"""The torture harness: a real streaming job in its own driver process, killed again and again.

Each *run* starts ``tests.sink.driver`` on the same table and checkpoint while new input files
keep appearing, and ends in one of these ways:

* **boundary kill** - ``SEO_CRASH_AT=<boundary>`` makes the driver SIGKILL itself at that point of
  the commit protocol (the driver's sink gets a fault-injecting storage through its
  ``storage_wrapper`` option, ``streaming_exactly_once.testing.faults``); the harness cycles through every boundary of the run's staging mode
  (``after-manifest+3ms`` included: a kill a few milliseconds after the manifest entry appears);
* **random kill** - the harness SIGKILLs the driver at a random moment;
* **clean run** - the driver drains its input and stops.

Between runs it mixes in: deleting the checkpoint (the file source re-reads every input file);
deleting the checkpoint's latest ``commits/N`` (Spark replays a committed batch); switching the
staging mode; and starting a second writer against the live table (it must fail fast with
``ConcurrentWriterError`` while the first carries on); and, with ``zombies``, a *zombie
takeover* (``zombie_takeover``): a driver frozen with SIGSTOP at a commit boundary while a
successor driver commits through a compaction and is still running when the zombie is resumed.
At the end a clean run drains everything, ``recover`` runs, and ``verify.verify_tortured_table``
checks the result independently.

With ``kafka`` the input is the Kafka stand-in (``streaming_exactly_once.testing.fake_kafka``) instead of CSV
files: the feeder produces records with unique ids to topics ``a`` and ``b`` (two partitions
each; ``b`` grows a third halfway through the schedule), and every checkpoint deletion restarts
the query alternately from ``startingOffsets=earliest`` (the sink must drop what the table holds,
row by row) and from ``sink.starting_offsets()`` (it must start exactly where the table's records
end); ``verify.verify_tortured_kafka`` checks every produced record once and the table's offsets.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from streaming_exactly_once.testing.faults import BOUNDARIES, COMPACTION_ONLY, DELTA_ONLY, GROUP_ONLY, ICEBERG_ONLY, SCHEMA_ONLY

REPO = Path(__file__).resolve().parents[2]

#: ``kafka``: the topics and their partitions at the start (``b`` grows one halfway through)
KAFKA_TOPICS = {"a": 2, "b": 2}
#: where each checkpoint deletion restarts the query from, in turn (``table``: ``sink.starting_offsets()``)
KAFKA_RESTARTS = ("earliest", "table")
#: the sink's warning when it drops rows the table holds (``sink.offset_guard``)
DROPPED = re.compile(r"batch (\d+) of query (\S+): dropped (\d+) row\(s\)")

#: A dataset group's commit (``--forks``): no single-table manifest step, no direct-mode cleanup.
#: (A driver's table changes its schema at its first batch only - unless ``evolve`` adds a column
#: at every run's first batch: ``after-schema`` joins the cycle then, ``SCHEMA_EXTRA``.)
GROUP_BOUNDARIES = [b for b in BOUNDARIES if b not in ("after-manifest", "after-cleanup", *DELTA_ONLY, *ICEBERG_ONLY, *SCHEMA_ONLY, *COMPACTION_ONLY)]
_FORMAT_ONLY = (*DELTA_ONLY, *ICEBERG_ONLY, *SCHEMA_ONLY, *COMPACTION_ONLY)
RENAME_BOUNDARIES = [b for b in BOUNDARIES if b not in ("after-cleanup", *GROUP_ONLY, *_FORMAT_ONLY)] + ["after-manifest+3ms"]
DIRECT_BOUNDARIES = [b for b in BOUNDARIES if b not in ("mid-move", "after-move", *GROUP_ONLY, *_FORMAT_ONLY)] + ["after-manifest+3ms"]
#: A ``format="delta"`` table (``delta``): ``after-manifest`` is the instant before its Delta
#: commit, ``after-manifest+3ms`` usually inside it (delta-rs writing ``_delta_log/N.json`` or a
#: checkpoint), ``after-delta`` the instant after it, ``after-delta+3ms`` the next steps' first writes.
DELTA_EXTRA = ["after-delta", "after-delta+3ms"]
#: ``evolve``: every run's first batch adds a column - the instant after its schema record and a
#: few ms later (its manifest entry on the way).
SCHEMA_EXTRA = ["after-schema", "after-schema+3ms"]


def boundaries_of(mode: str, *, delta: bool = False, evolve: bool = False) -> list[str]:
    """Every boundary a single table's commit in staging ``mode`` reaches."""
    base = RENAME_BOUNDARIES if mode == "rename" else DIRECT_BOUNDARIES
    return list(base) + (DELTA_EXTRA if delta else []) + (SCHEMA_EXTRA if evolve else [])


@dataclass
class TortureConfig:
    work: Path
    kills: int = 30
    rows_per_file: int = 20
    files_per_run: int = 3
    files_per_trigger: int = 2
    seed: int = 7
    lease_timeout: str = "20s"
    checkpoint_deletions: int = 2
    replays: int = 2
    concurrent_writers: int = 1
    run_timeout_s: float = 60.0
    random_kill_share: float = 0.3
    boundary_modes: tuple[str, ...] = ("rename", "direct")  # whose every boundary is killed at once
    name: str = "torture"
    log: bool = True
    forks: bool = False  # a DatasetSink with two outputs (tests.sink.driver --forks) instead of one table
    compact_interval: int = 10  # of every driver's table (fixed when the table is created)
    zombies: int = 0  # zombie takeovers mixed into the run (``zombie_takeover``)
    #: drivers are Spark Connect clients with their own local server (``driver --connect``): the
    #: sink runs in the server's foreachBatch worker, which kills itself at a boundary; the driver
    #: then kills its whole process group (client, server, worker), as a crashed machine would.
    connect: bool = False
    #: kill at these boundaries only (default: every boundary of ``boundary_modes``)
    boundaries: tuple[str, ...] = ()
    #: the table is ``format="delta"`` (``driver --format delta``, ``_spark_metadata`` kept too):
    #: the Delta step's boundaries join the cycle, and ``verify.verify_tortured_delta`` checks it.
    delta: bool = False
    #: every driver adds a column to the stream (``driver --evolve N``, ``schema_evolution="add_columns"``):
    #: each run's first batch changes the table's schema, and ``after-schema`` joins the cycle
    evolve: bool = False
    #: with ``delta``: ``spark_manifest=False`` (``driver --private-manifest``), the manifest in ``_seo/manifest``
    private_manifest: bool = False
    #: the input is the Kafka stand-in (``driver --kafka``): records produced to two topics, a
    #: partition added halfway, checkpoint deletions restarting from ``earliest`` and from
    #: ``sink.starting_offsets()`` in turn; ``verify.verify_tortured_kafka`` checks the table
    kafka: bool = False


def clear_unstarted_checkpoint(checkpoint: Path) -> bool:
    """A driver killed while Spark wrote a fresh checkpoint's first offsets file leaves only its
    temp file; Spark 4.3 then refuses the location for good (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY:
    "should be empty on batch 0") and says to delete it - which an operator does (True). It holds no batch."""
    offsets = checkpoint / "offsets"
    if offsets.is_dir() and not any(n.isdigit() for n in os.listdir(offsets)) and any(os.scandir(offsets)):
        shutil.rmtree(checkpoint, ignore_errors=True)
        return True
    return False


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a driver and everything it started (its JVM; a Connect server's workers)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclass
class TortureStats:
    runs: int = 0
    kills: int = 0
    boundary_kills: dict[str, int] = field(default_factory=dict)
    random_kills: int = 0
    clean_runs: int = 0
    checkpoint_deletions: int = 0
    replays: int = 0
    concurrent_rejected: int = 0
    zombies: dict[str, str] = field(default_factory=dict)  # pause point -> how the zombie ended
    mode_runs: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    files: int = 0
    boundary_retries: int = 0  # boundary runs that timed out before reaching it, run again
    #: ``kafka``: checkpoint deletions by where the new query started (earliest / table)
    kafka_restarts: dict[str, int] = field(default_factory=dict)
    #: ``kafka``: rows the sink dropped as already in the table, by where the run's checkpoint
    #: started (initial / earliest / table); a batch retried after a kill counts again
    kafka_dropped: dict[str, int] = field(default_factory=dict)
    kafka_records: int = 0


class TortureRun:
    def __init__(self, config: TortureConfig) -> None:
        self.c = config
        self.rng = random.Random(config.seed)
        self.input = config.work / "input"
        self.table = config.work / "table"
        self.checkpoint = config.work / "checkpoint"
        self.done_marker = config.work / "DONE"
        self.stats = TortureStats()
        self._next_file = 0
        self.input.mkdir(parents=True, exist_ok=True)
        self.kafka = config.work / "kafka"
        self._partitions = dict(KAFKA_TOPICS)
        self._next_id = 0
        self._kafka_start = "earliest"  # startingOffsets for an empty checkpoint (the driver's --starting-offsets)
        self._kafka_origin = "initial"  # where the current checkpoint's query started
        self._kafka_exercised = True  # a query from that start ran (from earliest: the sink dropped rows)

    # -- input -------------------------------------------------------------------------------

    def feed(self, n: int) -> None:
        if self.c.kafka:
            self._produce(n)
            return
        from tests.datagen import write_csv_files

        write_csv_files(self.input, n_files=n, rows_per_file=self.c.rows_per_file, start_file=self._next_file)
        self._next_file += n
        self.stats.files = self._next_file

    def _produce(self, n: int) -> None:
        """``n`` x ``rows_per_file`` records with unique ids (their value), round-robin over
        every partition of the topics."""
        from streaming_exactly_once.testing.fake_kafka import produce

        parts = [(topic, p) for topic, count in self._partitions.items() for p in range(count)]
        values: dict[tuple[str, int], list[str]] = {tp: [] for tp in parts}
        for _ in range(n * self.c.rows_per_file):
            values[parts[self._next_id % len(parts)]].append(str(self._next_id))
            self._next_id += 1
        for (topic, p), batch in values.items():
            produce(self.kafka, topic, p, batch)
        self._next_file += n
        self.stats.files = self._next_file
        self.stats.kafka_records = self._next_id

    def _feeder(self, stop: threading.Event, every_s: float) -> None:
        while not stop.wait(every_s):
            if self.done_marker.exists():
                return
            self.feed(1)

    # -- one driver --------------------------------------------------------------------------

    def _clear_unstarted_checkpoint(self, checkpoint: Path) -> None:
        if clear_unstarted_checkpoint(checkpoint):
            self._say(f"deleted {checkpoint.name}: a kill during its first offsets write left only a temp file, which Spark refuses")

    def launch(
        self,
        *,
        mode: str,
        checkpoint: Path | None = None,
        env_extra: dict | None = None,
        files_per_trigger: int | None = None,
        until_done: Path | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> subprocess.Popen:
        self._clear_unstarted_checkpoint(checkpoint or self.checkpoint)
        source = ["--kafka", str(self.kafka), "--starting-offsets", self._kafka_start] if self.c.kafka else ["--input", str(self.input)]
        cmd = (
            [
                sys.executable,
                "-m",
                "tests.sink.driver",
                *source,
                "--table",
                str(self.table),
                "--checkpoint",
                str(checkpoint or self.checkpoint),
                "--mode",
                mode,
                "--files-per-trigger",
                str(files_per_trigger or self.c.files_per_trigger),
                "--lease-timeout",
                self.c.lease_timeout,
                "--until-done",
                str(until_done or self.done_marker),
                "--retain",
                "100000",
                "--compact-interval",
                str(self.c.compact_interval),
            ]
            + (["--forks"] if self.c.forks else [])
            + (["--connect"] if self.c.connect else [])
            + (["--format", "delta"] if self.c.delta else [])
            + (["--private-manifest"] if self.c.private_manifest else [])
            + (["--evolve", str(self.stats.runs)] if self.c.evolve else [])
            + list(extra_args)
        )
        env = dict(os.environ)
        for key in ("SEO_CRASH_AT", "SEO_FAIL_AT", "SEO_PAUSE_AT"):
            env.pop(key, None)
        # C1-only JIT: drivers live for seconds, so a cheaper JIT starts Spark ~20% faster
        env.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' pyspark-shell")
        env.update(env_extra or {})
        # its own process group: a kill takes the driver's JVM (and a Connect server's workers) too
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    @staticmethod
    def wait_started(proc: subprocess.Popen, timeout: float) -> list[str]:
        """Lines up to STARTED/CONCURRENT/FENCED; a thread keeps draining the pipe afterwards."""
        lines: list[str] = []
        ready = threading.Event()

        def pump() -> None:
            for line in proc.stdout:
                lines.append(line)
                if line.startswith(("STARTED", "CONCURRENT", "FENCED")):
                    ready.set()
            ready.set()

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        proc._seo_lines = lines  # type: ignore[attr-defined]
        proc._seo_pump = thread  # type: ignore[attr-defined]
        ready.wait(timeout)
        return list(lines)

    def _say(self, text: str) -> None:
        if self.c.log:
            print(f"[{self.c.name} {time.strftime('%H:%M:%S')}] {text}", flush=True)

    def run_once(
        self, *, mode: str, crash_at: str | None, random_kill: bool, timeout_s: float | None = None, files_per_trigger: int | None = None
    ) -> str:
        self.stats.runs += 1
        self.stats.mode_runs[mode] = self.stats.mode_runs.get(mode, 0) + 1
        env = {"SEO_CRASH_AT": crash_at} if crash_at else {}
        proc = self.launch(mode=mode, env_extra=env, files_per_trigger=files_per_trigger)
        stop_feed = threading.Event()
        feeder = threading.Thread(target=self._feeder, args=(stop_feed, 0.7), daemon=True)
        feeder.start()
        outcome = "?"
        timed_out = False
        try:
            started = self.wait_started(proc, self.c.run_timeout_s)
            if started and started[-1].startswith("STARTED") and random_kill:
                time.sleep(self.rng.uniform(0.2, 3.0))
                kill_group(proc)
            try:
                proc.wait(timeout=timeout_s or self.c.run_timeout_s)
            except subprocess.TimeoutExpired:
                kill_group(proc)  # did not reach its boundary in time: a random kill
                proc.wait()
                random_kill = timed_out = True
            rc = proc.returncode
            if rc == -signal.SIGKILL:
                # A driver killed at its boundary killed only itself: its JVM (same process
                # group) would go on until it noticed, ~130 ms later, still writing Spark's
                # checkpoint. The machine dies whole, as in a real crash.
                kill_group(proc)
                self.stats.kills += 1
                if random_kill or not crash_at:
                    self.stats.random_kills += 1
                    outcome = "timed out, killed" if timed_out else "random kill"
                else:
                    where = re.sub(r"@\d+", "", crash_at)  # the boundary, whichever batch reached it
                    self.stats.boundary_kills[where] = self.stats.boundary_kills.get(where, 0) + 1
                    outcome = f"killed at {crash_at}"
            elif rc == 0:
                self.stats.clean_runs += 1
                outcome = "clean"
            else:
                proc._seo_pump.join(timeout=5)
                output = "".join(proc._seo_lines)
                # printed whole as well: pytest shortens an assertion's message, and the driver's
                # own error (the sink's, naming the batch and file) sits at the end of its output
                print(f"[{self.c.name}] driver failed (rc={rc}), its output:\n{output[-20000:]}", flush=True)
                raise AssertionError(f"driver failed (rc={rc}):\n{output[-6000:]}")
        finally:
            stop_feed.set()
            feeder.join()
            if proc.poll() is None:
                kill_group(proc)
                proc.wait()
            if self.c.kafka:
                self._scan_kafka_run(proc)
        return outcome

    def _scan_kafka_run(self, proc: subprocess.Popen) -> None:
        """Rows the run's sink dropped as already in the table (its warnings, once per batch),
        and whether the run's query exercised its checkpoint's start (a kill in the recovery
        of the previous run's commit stops a driver before its query starts)."""
        pump = getattr(proc, "_seo_pump", None)
        if pump is not None:
            pump.join(timeout=10)
        lines = list(getattr(proc, "_seo_lines", []))
        batches = {(m.group(2), m.group(1)): int(m.group(3)) for line in lines if (m := DROPPED.search(line))}
        origin = self._kafka_origin
        if batches:
            self.stats.kafka_dropped[origin] = self.stats.kafka_dropped.get(origin, 0) + sum(batches.values())
        if origin == "earliest" and batches:
            self._kafka_exercised = True
        if origin == "table" and any(line.startswith("STARTING-OFFSETS {") for line in lines):
            self._kafka_exercised = True  # a query started from the table's offsets

    def second_writer_is_rejected(self, mode: str) -> None:
        """While a writer runs, a second one on the same table must fail fast and change nothing."""
        epochs = self.table / "_seo" / "epochs"

        def newest_epoch() -> int:
            return max((int(e.name) for e in epochs.iterdir() if e.name.isdigit()), default=0) if epochs.exists() else 0

        before = newest_epoch()
        first = self.launch(mode=mode)
        try:
            started = self.wait_started(first, self.c.run_timeout_s)
            assert started and started[-1].startswith("STARTED"), "".join(started)
            if self.c.connect:  # the lease is taken at the first batch there: wait until the first writer holds it
                deadline = time.time() + self.c.run_timeout_s
                while newest_epoch() <= before:
                    assert first.poll() is None and time.time() < deadline, "the first writer never took the table"
                    time.sleep(0.2)
            t0 = time.time()
            # a live writer, not one on its way out: no need for Connect's generous handover wait
            second = self.launch(mode=mode, checkpoint=self.c.work / "other-checkpoint", extra_args=("--connect-handover-wait", "5s"))
            out, _ = second.communicate(timeout=self.c.run_timeout_s)
            if not self.c.connect:  # under Connect the lease is taken at the first batch, after the query started
                assert not (self.c.work / "other-checkpoint" / "offsets").exists(), "the second writer's query ran"
            assert second.returncode == 3 and "CONCURRENT" in out, out[-3000:]
            self.stats.concurrent_rejected += 1
            self._say(f"second writer rejected in {time.time() - t0:.1f}s: {out.splitlines()[-1][:140]}")
            assert first.poll() is None, "the first writer died when the second one tried to start"
        finally:
            kill_group(first)
            first.wait()
            self.stats.kills += 1
            self.stats.random_kills += 1

    # -- a zombie next to a live successor ---------------------------------------------------

    def _manifest_dirs(self) -> list[Path]:
        if self.c.forks:  # the group's tables: raw/ and one per dataset under byp/
            return [d for d in self.table.glob("**/_spark_metadata") if d.is_dir()]
        return [self.table / ("_seo/manifest" if self.c.private_manifest else "_spark_metadata")]

    def _zombie_claims(self, storage, epoch: int, *, pending: bool) -> set[int]:
        """Batches (of the table, or of the group) committed under writer ``epoch``'s claim -
        and, with ``pending``, claimed in the WAL but not finished yet."""
        from streaming_exactly_once.commit.protocol.wal import CommitSequenceStore
        from streaming_exactly_once.table.commits_log import CommitsLog

        commits = CommitsLog(storage, interval=self.c.compact_interval)
        claims = {b for b in commits.list_batch_ids() if (r := commits.record(b)) is not None and r.epoch == epoch}
        if pending:
            wal = CommitSequenceStore(storage)
            claims |= {b for b in wal.pending() if (seq := wal.get(b)) is not None and seq.epoch == epoch}
        return claims

    def _batch_ids(self) -> dict[Path, list[int]]:
        out = {}
        for d in self._manifest_dirs():
            if d.is_dir():
                out[d] = sorted(int(n.split(".")[0]) for n in os.listdir(d) if n[:1].isdigit())
        return out

    def zombie_takeover(self, *, mode: str, pause_at: str, zombie_files: int = 3, drain: bool = True) -> str:
        """A driver frozen with SIGSTOP at ``pause_at`` (``SEO_PAUSE_AT``) loses its lease; a
        successor driver on the same checkpoint commits through at least one compaction while
        the zombie is frozen and is still running when the zombie gets SIGCONT. The zombie must
        stop without claiming anything after the takeover - at our fence (``WriterFencedError``)
        or, if it woke up inside a batch it had claimed before (the successor completed it for
        it), at Spark's own guard on the shared checkpoint - and the successor must carry on
        and commit through another compaction. Then it drains the input and stops (``drain``),
        or - in a long run, whose backlog only a drain run with big triggers gets through - it is
        SIGKILLed. Returns how the zombie ended.
        """
        from streaming_exactly_once.commit.protocol.lease import list_epochs
        from streaming_exactly_once.storage import open_storage

        n = len(self.stats.zombies)
        marker = self.c.work / f"zombie-{n}-done"
        lease_s = parse_seconds(self.c.lease_timeout)
        k = self.c.compact_interval
        self.feed(zombie_files)
        zombie = self.launch(mode=mode, env_extra={"SEO_PAUSE_AT": pause_at}, until_done=marker)
        successor = None
        try:
            self.wait_started(zombie, 0)  # only starts the pump: it may freeze in its start-up recovery
            deadline = time.time() + self.c.run_timeout_s * 2
            while process_state(zombie.pid) != "T":
                assert zombie.poll() is None, f"zombie exited (rc={zombie.returncode}) before {pause_at}:\n{''.join(zombie._seo_lines)[-3000:]}"
                assert time.time() < deadline, f"zombie never reached {pause_at}:\n{''.join(zombie._seo_lines)[-3000:]}"
                time.sleep(0.1)
            storage = open_storage(str(self.table))
            zombie_epoch = list_epochs(storage)[-1]
            claimed_before = self._zombie_claims(storage, zombie_epoch, pending=True)
            frozen = self._batch_ids()
            time.sleep(lease_s + 1)  # its heartbeat stopped with it
            self.feed(k + 2)
            successor = self.launch(mode=mode, until_done=marker)
            started = self.wait_started(successor, self.c.run_timeout_s * 2)
            assert started and started[-1].startswith("STARTED"), "".join(successor._seo_lines)[-3000:]
            assert int(started[-1].split()[-1]) > zombie_epoch
            deadline = time.time() + self.c.run_timeout_s * 3
            while not self._compacted_since(frozen):
                assert successor.poll() is None, f"successor died:\n{''.join(successor._seo_lines)[-3000:]}"
                assert time.time() < deadline, (
                    f"successor committed no compaction while the zombie was frozen:\n{''.join(successor._seo_lines)[-3000:]}"
                )
                time.sleep(0.2)
            os.kill(zombie.pid, signal.SIGCONT)
            try:
                code = zombie.wait(timeout=self.c.run_timeout_s * 2)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"zombie still running after SIGCONT (not fenced?):\n{''.join(zombie._seo_lines)[-3000:]}") from None
            zombie._seo_pump.join(timeout=10)
            output = "".join(zombie._seo_lines)
            assert successor.poll() is None, (
                f"the successor died while the zombie was awake:\n{''.join(successor._seo_lines)[-3000:]}\n--- zombie:\n{output[-2000:]}"
            )
            claimed = pause_at.split("@")[0] not in ("before-stage", "after-stage", "after-intent", "before-wal")
            if claimed:
                assert code != 0 and ("FENCED" in output or "CONCURRENT_STREAM_LOG_UPDATE" in output), output[-3000:]
            else:
                assert code == 4 and "FENCED" in output, f"zombie frozen at {pause_at} was not fenced (rc={code}):\n{output[-3000:]}"
            outcome = "fenced" if "FENCED" in output else "spark-checkpoint-guard"
            woke = self._batch_ids()
            self.feed(k + 1)  # the successor commits through another compaction after the wake-up
            deadline = time.time() + self.c.run_timeout_s * 3
            while not self._compacted_since(woke):
                assert successor.poll() is None, f"successor died after the zombie woke up:\n{''.join(successor._seo_lines)[-3000:]}"
                assert time.time() < deadline, f"successor committed no compaction after the zombie woke up:\n{''.join(successor._seo_lines)[-3000:]}"
                time.sleep(0.2)
            if drain:
                marker.write_text("done")
                assert successor.wait(timeout=self.c.run_timeout_s * 3) == 0, "".join(successor._seo_lines)[-3000:]
            else:
                kill_group(successor)
                successor.wait()
                self.stats.kills += 1
                self.stats.random_kills += 1
            late = sorted(self._zombie_claims(storage, zombie_epoch, pending=False) - claimed_before)
            assert not late, f"batches {late} were published under claims the zombie (epoch {zombie_epoch}) made after the takeover"
        finally:
            marker.write_text("done")
            for proc in (zombie, successor):
                if proc is not None and proc.poll() is None:
                    kill_group(proc)
                    proc.wait()
        self.stats.zombies[f"{n}:{mode}:{pause_at}"] = outcome
        self._say(f"zombie at {pause_at} ({mode}) woke next to its successor -> {outcome}")
        return outcome

    def _compacted_since(self, before: dict[Path, list[int]]) -> bool:
        """A compact file of a batch the successor claimed itself: beyond anything the table
        had at the freeze and beyond the zombie's in-flight batch (any of the group's tables)."""
        for d in self._batch_ids():
            in_flight = max(before.get(d, []), default=-1) + 1
            if any(n.endswith(".compact") and int(n.split(".")[0]) > in_flight for n in os.listdir(d)):
                return True
        return False

    # -- the whole run -----------------------------------------------------------------------

    def run(self) -> TortureStats:
        t0 = time.time()
        self.feed(self.c.files_per_run)
        schedule: list[tuple[str, str | None]] = []
        rename_cycle = boundaries_of("rename", delta=self.c.delta, evolve=self.c.evolve)
        direct_cycle = boundaries_of("direct", delta=self.c.delta, evolve=self.c.evolve)
        if self.c.forks:  # one commit sequence for every output: the group's boundaries
            rename_cycle = direct_cycle = list(GROUP_BOUNDARIES) + (SCHEMA_EXTRA if self.c.evolve else [])
        if self.c.boundaries:
            rename_cycle = [b for b in rename_cycle if b in self.c.boundaries]
            direct_cycle = [b for b in direct_cycle if b in self.c.boundaries]
        # every boundary of both modes at least once, then a mix
        if "rename" in self.c.boundary_modes:
            schedule += [("rename", b) for b in rename_cycle]
        if "direct" in self.c.boundary_modes:
            schedule += [("direct", b) for b in direct_cycle]
        others = [m for m in ("rename", "direct") if m not in self.c.boundary_modes]
        while len(schedule) < self.c.kills:
            mode = others.pop() if others else self.rng.choice(["rename", "direct"])  # the other mode runs too
            if self.rng.random() < self.c.random_kill_share:
                schedule.append((mode, None))
            else:
                schedule.append((mode, self.rng.choice(rename_cycle if mode == "rename" else direct_cycle)))
        events = {}
        if len(schedule) > 4:
            kinds = (
                ["delete-checkpoint"] * self.c.checkpoint_deletions
                + ["replay"] * self.c.replays
                + ["second-writer"] * self.c.concurrent_writers
                + ["zombie"] * self.c.zombies
            )
            slots = self.rng.sample(range(2, len(schedule)), k=min(len(schedule) - 2, len(kinds)))
            events = dict(zip(slots, kinds, strict=False))
        zombie_cycle = {m: [b for b in boundaries_of(m, delta=self.c.delta) if "+" not in b] for m in ("rename", "direct")}
        if self.c.forks:
            zombie_cycle = {"rename": list(GROUP_BOUNDARIES), "direct": list(GROUP_BOUNDARIES)}
        zombie_start = 0
        replay_pending = False  # a replay found no committed batch yet: it waits for the next one
        for i, (mode, boundary) in enumerate(schedule):
            event = events.get(i)
            restarted = False  # kafka: this run's query starts on a deleted checkpoint
            if replay_pending and event is None:
                event = "replay"
            if event == "delete-checkpoint":
                shutil.rmtree(self.checkpoint, ignore_errors=True)
                restart = ""
                if self.c.kafka:  # the new query starts from earliest / from the table's offsets, in turn
                    # (the same start again if no query ran from the last one)
                    if self._kafka_exercised and self._kafka_origin != "initial":
                        self._kafka_start = KAFKA_RESTARTS[(KAFKA_RESTARTS.index(self._kafka_start) + 1) % len(KAFKA_RESTARTS)]
                    self._kafka_origin = self._kafka_start
                    self._kafka_exercised = False
                    self.stats.kafka_restarts[self._kafka_start] = self.stats.kafka_restarts.get(self._kafka_start, 0) + 1
                    restart = f", the new query starts from {'earliest' if self._kafka_start == 'earliest' else 'sink.starting_offsets()'}"
                self.stats.checkpoint_deletions += 1
                restarted = self.c.kafka
                self._say(f"deleted the checkpoint{restart}")
            elif event == "replay":
                commits = self.checkpoint / "commits"
                ids = sorted(int(n) for n in os.listdir(commits) if n.isdigit()) if commits.exists() else []
                replay_pending = not ids
                if ids:
                    os.remove(commits / str(ids[-1]))
                    # and Hadoop's checksum sidecar: left behind, it makes Spark's rewrite of
                    # commits/N fail ("Multiple streaming queries are concurrently using ...",
                    # caused by "Rename destination .N.crc already exists") - CI saw it once
                    crc = commits / f".{ids[-1]}.crc"
                    if crc.exists():
                        os.remove(crc)
                    self.stats.replays += 1
                    self._say(f"deleted checkpoint commits/{ids[-1]}: Spark replays a committed batch")
            elif event == "second-writer":
                self.second_writer_is_rejected(mode)
            elif event == "zombie":
                cycle = zombie_cycle[mode]
                if not self.stats.zombies:  # the seed decides where in the cycle a run starts
                    zombie_start = self.rng.randrange(len(cycle))
                pause_at = cycle[(zombie_start + len(self.stats.zombies)) % len(cycle)]
                self.zombie_takeover(mode=mode, pause_at=pause_at, drain=False)
            self.feed(self.c.files_per_run)
            if self.c.kafka and i == len(schedule) // 2:
                # topic b grows a partition: the feeder's next records (while this run's query
                # is up) go to it too, and the query reads it from its first record
                self._partitions["b"] += 1
                self._say(f"topic b grows partition {self._partitions['b'] - 1}")
            crash_at = boundary
            if (replay_pending or restarted) and boundary is not None and not boundary.startswith("after-schema"):
                # kill in the second batch: the first one commits (a schema changes in the first
                # only); after a kafka checkpoint deletion, the new query's first batch runs even
                # when this run's recovery of the last run's commit passes the boundary once
                name, _, delay = boundary.partition("+")
                crash_at = f"{name}@2" + (f"+{delay}" if delay else "")
            outcome = self.run_once(mode=mode, crash_at=crash_at, random_kill=boundary is None)
            self._say(f"run {i + 1}/{len(schedule)} {mode:6s} {boundary or 'random':20s} -> {outcome}  (kills {self.stats.kills})")
            for _retry in range(2):
                if outcome != "timed out, killed" or boundary is None:
                    break
                # a slow machine (Spark's start-up under load), not a boundary that cannot be
                # reached: that one times out again, and the test names it as never hit
                self.stats.boundary_retries += 1
                outcome = self.run_once(mode=mode, crash_at=crash_at, random_kill=False)
                self._say(f"run {i + 1}/{len(schedule)} again {mode:6s} {boundary:20s} -> {outcome}  (kills {self.stats.kills})")
        # drain: no more input, then clean runs until the backlog the kills left is consumed. The
        # feeder kept adding files while runs were being killed, so the backlog can be hundreds of
        # files: bigger triggers and no per-run time limit (a run that ends early is retried).
        self.done_marker.write_text("done")
        backlog = self.stats.files
        for attempt in range(3):
            outcome = self.run_once(
                mode="rename",
                crash_at=None,
                random_kill=False,
                timeout_s=max(self.c.run_timeout_s, 120 + backlog * 1.0),
                files_per_trigger=max(self.c.files_per_trigger, 25),
            )
            self._say(f"drain run {attempt + 1} -> {outcome}")
            if outcome == "clean":
                break
        else:
            raise AssertionError(f"{self.c.name}: the drain runs did not end cleanly")
        self.stats.wall_s = time.time() - t0
        return self.stats


def process_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return None


def parse_seconds(text: str) -> float:
    """``3s``/``500ms``/``1m`` as the driver's --lease-timeout takes them."""
    from streaming_exactly_once.config import parse_duration_ms

    return parse_duration_ms(text, key="lease_timeout") / 1000
