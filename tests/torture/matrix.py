"""The torture matrix: every supported table configuration (``matrix_combos``) killed with -9 at
every commit boundary, frozen as a zombie beside its successor, restarted with configurations it
must refuse, and repaired between kills with the CLI's maintenance commands as an operator would
after a crash. At the commit layer, in real processes (``tests.commit.processes``): no Spark, so
hundreds of kills take minutes.

    python -m tests.torture.matrix --kills 420 [--seed 7] [--jobs 2] [--combo NAME ...]
        [--zombie-every 4] [--wrong-every 3] [--work DIR] [--keep] [--out FILE]

Each combination gets one table (on local disk, or in a bucket of moto's S3 server, started here
on 127.0.0.1) and a sequence of cycles, each one of:

* **kill** - a writer opens the table and commits a few batches; it SIGKILLs itself at a
  commit boundary (cycling through every boundary the combination reaches, at its 1st-3rd
  occurrence, sometimes armed before the open so that a recovery's roll-forward is hit too);
* **zombie** - a writer SIGSTOPs itself at a boundary; once its lease has expired a successor
  takes over and commits through a compaction; the zombie is resumed while the successor still
  runs: it must be fenced (``WriterFencedError``) except that it may finish a batch it claimed
  before the takeover, and the successor must carry on unharmed;
* **wrong config** (after every few kills, before anything repairs the table) - a writer
  restarts with a configuration the table must refuse (flipped ``spark_manifest``, another
  format, partitioning or ``compact_interval``): it must fail with ``ConfigError`` and leave
  every file as it was, byte for byte (the lease's own files aside);

then 0-3 (on S3 0-2) of ``seo recover``, ``seo gc`` (``--older-than`` 0s or 1h), ``seo verify`` and,
on a table with compaction on, ``seo compact``,
at random, each a process of its own; then the check: every row of every committed batch (a
writer reported it, or the commits log records it) is read exactly once by an independent parse
of the manifest, by the library's reader and, for Delta, by delta-rs; any other batch is all or
nothing; no listed file is missing; verify finds no error (warnings are what a crash leaves
until recovery); ``seo audit --from 0`` finds no violation in the batches' ledgers (a pending
claim's batches are in flight). At the end a clean writer drains the query, then recover, gc and verify run:
verify must report nothing, and every batch must be read exactly once.

The JSON summary (stdout, and ``--out``) has per combination: kills, boundaries hit (and not
reached), zombies, wrong configurations refused, maintenance commands run with their exit codes,
duplicates, losses, missing files, the final verify result, and each problem with its cycle.
``--kills`` is spread evenly over the combinations; a kill whose boundary the writer did not
reach is tried again (twice), and a combination whose table no writer can open any more stops
early (so, while a library bug breaks tables, fewer kills happen than planned: 420 plans ~26 per
combination, >= 300 done). ``make test`` runs a bounded slice of it (``test_matrix.py``). Exit
code 1 if any run failed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.commit.processes import QA, Writer, batch_rows, stop_all
from tests.torture.matrix_checks import audit_problems, changes, judge, read_rows, recorded_batches, seo, snapshot, verify_problems
from tests.torture.matrix_combos import BY_NAME, CLAIMED, COMBOS, COMPACTION, UNSUPPORTED, Combo

ROWS, FILES = 4, 2
KILL_LEASE_MS, ZOMBIE_LEASE_MS = 1500, 800


@dataclass
class Stats:
    kills: int = 0
    boundaries: dict[str, int] = field(default_factory=dict)
    not_reached: dict[str, int] = field(default_factory=dict)
    zombies: dict[str, str] = field(default_factory=dict)
    wrong_configs: dict[str, str] = field(default_factory=dict)
    maintenance: dict[str, dict[str, int]] = field(default_factory=dict)  # command -> exit code -> times
    duplicates: int = 0
    losses: int = 0
    missing_files: int = 0
    final_verify: str = ""
    final_audit: str = ""
    problems: list[str] = field(default_factory=list)
    wall_s: float = 0.0


class Campaign:
    """One combination's table through a sequence of cycles (see the module docstring)."""

    def __init__(self, combo: Combo, root: str, storage_options: dict | None, seed: int) -> None:
        from streaming_exactly_once.storage import open_storage

        self.combo, self.root, self.storage_options = combo, root, storage_options
        self.storage = open_storage(root, storage_options)
        self.rng = random.Random(seed)
        self.stats = Stats()
        self.acked: set[int] = set()
        self.attempted = 0  # Spark batches 0..attempted-1 were tried
        self.cycle = ""
        self._wrong_at = self.rng.randrange(len(combo.wrong_configs()))
        #: batches the successor of a zombie commits before the zombie wakes up, the final writer's
        self.successor_batches = self.final_batches = combo.interval + 1

    # -- writers -----------------------------------------------------------------------------------

    def _program(self, name: str, steps: list[dict], *, lease_ms: int = KILL_LEASE_MS, **overrides) -> dict:
        return self.combo.program(name, self.root, steps, storage_options=self.storage_options, lease_ms=lease_ms, **overrides)

    def _commits(self, count: int, **kw) -> dict:
        return {
            "do": "commits",
            "query": QA,
            "count": count,
            "rows": ROWS,
            "files": FILES,
            "mode": self.combo.staging,
            "first": self.next_batch(),
            **kw,
        }

    def next_batch(self) -> int:
        return max(self.acked, default=-1) + 1

    def _learn(self, *writers: Writer) -> None:
        for w in writers:
            for e in w.commits():
                self.attempted = max(self.attempted, e["batch"] + 1)
                if e["status"] in ("committed", "duplicate"):
                    self.acked.add(e["batch"])

    def _problem(self, text: str) -> None:
        self.stats.problems.append(f"[{self.cycle}] {text}")

    def _errors(self, w: Writer, *, allowed: tuple[str, ...] = ()) -> None:
        for e in w.events():
            if (e.get("event") == "error" or e.get("status") == "error") and e.get("error") not in allowed:
                self._problem(f"{w.name}: {e['error']}: {e['message'][:300]}")

    # -- cycles --------------------------------------------------------------------------------------

    def kill(self, boundary: str) -> str:
        """Whether the writer was "killed" at ``boundary``, finished first ("not reached": a
        janitor boundary's passes coalesce) or "failed" before it got there."""
        nth = self.rng.randint(1, 3)
        spec = f"{boundary}@{nth}"
        early = self.rng.random() < 0.3  # armed before the open: a recovery's roll-forward counts too
        arm = {"do": "arm", "crash_at": spec}
        # a boundary only compaction batches reach comes once in ``interval`` batches
        count = nth * self.combo.interval + 1 if boundary in self.combo.compaction_batch_only else nth + 1
        steps = ([arm] if early else []) + [
            {"do": "open", "retry_s": 5},
            self._commits(count, **({} if early else {"crash_at": spec})),
            {"do": "close"},
        ]
        self.cycle = f"kill at {spec}{' (armed before the open)' if early else ''}"
        w = Writer(self._program("K", steps))
        try:
            rc = w.wait(120)
        finally:
            stop_all([w])
        self._learn(w)
        if rc == -9:
            self.stats.kills += 1
            self.stats.boundaries[boundary] = self.stats.boundaries.get(boundary, 0) + 1
            self._errors(w, allowed=("InjectedFailure",))
            return "killed"
        self._errors(w)
        if rc == 0:
            self.stats.not_reached[boundary] = self.stats.not_reached.get(boundary, 0) + 1
            return "not reached"
        self._problem(f"the writer failed instead of reaching {spec} (rc {rc}): {w.output(1500)}")
        return "failed"

    def zombie(self, boundary: str) -> None:
        """The successor commits through a compaction while the zombie is frozen (``successor_batches``)."""
        self.cycle = f"zombie at {boundary}"
        work = Path(tempfile.mkdtemp(prefix="seo-zombie-"))
        ready, woke = work / "ready", work / "woke"
        a_steps = [
            {"do": "open", "retry_s": 5},
            self._commits(self.rng.randint(1, 2)),
            {
                "do": "commits",
                "query": QA,
                "count": self.combo.interval + 1 if boundary in self.combo.compaction_batch_only else 2,
                "rows": ROWS,
                "files": FILES,
                "mode": self.combo.staging,
                "pause_at": boundary,
            },
            {"do": "close"},
        ]
        writers: list[Writer] = []
        try:
            a = Writer(self._program("A", a_steps, lease_ms=ZOMBIE_LEASE_MS))
            writers.append(a)
            try:
                a.wait_stopped(60)
            except AssertionError:
                if a.proc.returncode != 0:
                    raise
                # the boundary did not come up in its batches (e.g. after-schema: only a batch
                # that changes the schema has the step): no zombie this time
                self._learn(a)
                self._errors(a)
                self.stats.not_reached[f"zombie:{boundary}"] = self.stats.not_reached.get(f"zombie:{boundary}", 0) + 1
                return
            before_wake = len(a.commits())
            self._learn(a)
            time.sleep(ZOMBIE_LEASE_MS / 1000 + 0.3)
            b_steps = [
                {"do": "open", "retry_s": 10},
                self._commits(self.successor_batches),
                {"do": "touch", "path": str(ready)},
                {"do": "wait", "path": str(woke)},
                {"do": "commits", "query": QA, "count": 1, "rows": ROWS, "files": FILES, "mode": self.combo.staging},
                {"do": "close"},
            ]
            b = Writer(self._program("B", b_steps, lease_ms=ZOMBIE_LEASE_MS))
            writers.append(b)
            b.wait_for(ready.exists, "its batches while the zombie is frozen", 120)
            a.resume()
            a.wait(120)
            woke.touch()
            rc_b = b.wait(120)
            self._learn(a, b)
            woken = [e for e in a.commits()[before_wake:] if e["step"] == 2]
            wrong = [
                e
                for i, e in enumerate(woken)
                if not (
                    (e["status"] == "error" and e["error"] == "WriterFencedError") or (i == 0 and e["status"] == "committed" and boundary in CLAIMED)
                )
            ]
            outcome = "fenced" if not wrong else "NOT FENCED"
            for e in wrong:
                self._problem(f"the zombie after waking up: batch {e['batch']} {e['status']} {e.get('error', '')} {e.get('message', '')[:200]}")
            self._errors(a, allowed=("WriterFencedError",))
            if rc_b != 0:
                self._problem(f"the successor ended with rc {rc_b}: {b.output(1500)}")
            self._errors(b)
            self.stats.zombies[f"{len(self.stats.zombies)}:{boundary}"] = outcome
        except AssertionError as exc:  # a writer never reached a point it must reach
            self._problem(f"harness: {str(exc)[:1500]}")
        finally:
            stop_all(writers)
            shutil.rmtree(work, ignore_errors=True)

    def wrong_config(self, name: str = "") -> None:
        """``name``: one of ``Combo.wrong_configs`` ("": the next one, round the list)."""
        configs = self.combo.wrong_configs()
        if not name:
            name = sorted(configs)[self._wrong_at % len(configs)]
            self._wrong_at += 1
        self.cycle = f"restart {name}"
        before = snapshot(self.storage)
        w = Writer(self._program("W", [{"do": "open"}], **configs[name]))
        rc = w.wait(120)
        errors = [e.get("error") for e in w.events("error")]
        after = snapshot(self.storage)
        diff = changes(before, after)
        # SchemaMismatchError is the ConfigError a partitioning or schema refusal raises
        refused = rc == 1 and len(errors) == 1 and errors[0] in ("ConfigError", "SchemaMismatchError")
        self.stats.wrong_configs[f"{len(self.stats.wrong_configs)}:{name}"] = "refused, nothing changed" if refused and not diff else "FAILED"
        if not refused:
            self._problem(f"a restart {name} was not refused with ConfigError (rc {rc}, {errors}): {w.output(800)}")
        if diff:
            self._problem(f"a restart {name} changed the table before it was refused: {diff[:8]}{' ...' if len(diff) > 8 else ''}")

    # -- maintenance and checks ----------------------------------------------------------------------

    def maintenance(self, commands: list[str] | None = None, *, max_commands: int = 3) -> list[tuple[str, int, str]]:
        if commands is None:
            # ``seo compact`` on a group's root compacts each of its tables in group batches
            choices = ["recover", "gc", "verify", *(["compact"] if self.combo.compaction else [])]
            commands = [self.rng.choice(choices) for _ in range(self.rng.randint(0, max_commands))]
        done = []
        for command in commands:
            args = [command, self.root]
            if command == "gc":
                args += ["--older-than", self.rng.choice(["0s", "1h"])]
            elif command == "compact":  # the writers' own policy (``COMPACTION``)
                args += ["--min-age", "0s", "--min-files", str(COMPACTION["min_files"]), "--target-size", str(COMPACTION["target_size"])]
            code, out = seo(*args, storage_options=self.storage_options)
            counts = self.stats.maintenance.setdefault(command, {})
            counts[str(code)] = counts.get(str(code), 0) + 1
            done.append((command, code, out))
            if command == "verify":
                if code not in (0, 3):
                    self._problem(f"seo verify exits {code}: {verify_problems(out)[:4]}")
            elif code != 0:
                self._problem(f"seo {' '.join(args[:1] + args[2:])} exits {code}: {out[-400:]}")
        return done

    def check(self, *, final: bool = False) -> None:
        """The rows (see the module docstring), verify's report: no error after any cycle
        (warnings - a pending claim, staging, orphans - are what a crash leaves until recovery),
        and the audit's: no violation (a pending claim's batches are in flight)."""
        from streaming_exactly_once.maintenance.verify import verify_table

        try:
            errors = [f"{p.kind} {p.path.rsplit('/', 2)[-2:]}: {p.detail[:120]}" for p in verify_table(self.storage).errors]
        except Exception as exc:  # noqa: BLE001 - a table verify cannot read is the finding
            errors = [f"{type(exc).__name__}: {str(exc)[:200]}"]
        if errors:
            self._problem(f"verify finds errors: {errors[:4]}")
        audit = audit_problems(self.storage)
        for text in audit:
            self._problem(f"seo audit --from 0: {text}")
        if final:
            self.stats.final_audit = "clean" if not audit else f"{len(audit)} violation(s): {audit[:3]}"
        recorded = recorded_batches(self.storage)
        committed = {b: batch_rows(0, b, ROWS) for b in self.acked | recorded}
        # a killed writer's in-flight batch reported nothing: up to two beyond the last report
        others = {b: batch_rows(0, b, ROWS) for b in range(self.attempted + 2) if b not in committed}
        for reader, rows in read_rows(self.storage, self.combo).items():
            found = judge(rows, committed, others, final=final, tables=self.combo.tables)
            self.stats.duplicates += sum(n - 1 for n in rows.ids.values() if n > 1)
            self.stats.losses += sum(1 for ids in committed.values() for i in ids if rows.ids[i] == 0) if not rows.error else 0
            self.stats.missing_files += len(rows.missing_files)
            for text in found:
                self._problem(f"{reader} reader: {text}")

    def finish(self) -> None:
        """A clean writer drains the query; then recover, gc, verify: nothing may be left."""
        self.cycle = "final drain"
        w = Writer(self._program("F", [{"do": "open", "retry_s": 10}, self._commits(self.final_batches), {"do": "close"}]))
        if w.wait(180) != 0:
            self._problem(f"the final writer failed: {w.output(1500)}")
        self._learn(w)
        self._errors(w)
        self.cycle = "final maintenance"
        self.maintenance(["recover", "gc"])
        if self.combo.compaction:  # files a compaction replaced are gc's alone to delete, by age
            code, out = seo("gc", self.root, "--older-than", "0s", storage_options=self.storage_options)
            if code != 0:
                self._problem(f"the final seo gc --older-than 0s exits {code}: {out[-400:]}")
        code, out = seo("verify", self.root, storage_options=self.storage_options)
        found = verify_problems(out)
        self.stats.final_verify = "clean" if code == 0 and not found else f"exit {code}: {found[:5]}"
        if code != 0 or found:
            self._problem(f"final seo verify exits {code}: {found[:5]}")
        self.check(final=True)

    # -- the whole campaign --------------------------------------------------------------------------

    def start(self) -> None:
        """The table's first batch, committed cleanly: the CLI finds no table before it."""
        self.cycle = "first batch"
        w = Writer(self._program("S", [{"do": "open"}, self._commits(1), {"do": "close"}]))
        if w.wait(120) != 0:
            self._problem(f"the first writer failed: {w.output(1500)}")
        self._learn(w)
        self._errors(w)

    def run(self, plan: list[tuple[str, str]], *, max_commands: int = 3, log=None) -> Stats:
        """``plan``: ("kill", boundary), ("zombie", boundary) or ("wrong", name or "") cycles, in
        order. A wrong configuration right after a kill restarts on the crash as it was: no
        maintenance and no check in between (the refused restart changes nothing, so the check
        after it sees what the kill left)."""
        t0 = time.time()
        self.start()
        seen = len(self.stats.problems)
        failed_in_a_row = 0
        for i, (what, boundary) in enumerate(plan):
            if failed_in_a_row >= 3:
                self._problem("no writer can open the table any more: the rest of the plan is skipped")
                break
            if what == "kill":
                outcome = self.kill(boundary)
                for _retry in range(2):  # another occurrence (the janitor's boundaries)
                    if outcome != "not reached":
                        break
                    outcome = self.kill(boundary)
                failed_in_a_row = failed_in_a_row + 1 if outcome == "failed" else 0
                if i + 1 < len(plan) and plan[i + 1][0] == "wrong":
                    if log is not None:
                        log(f"[{self.combo.name}] {self.cycle}: then the restart")
                    continue
            elif what == "zombie":
                self.zombie(boundary)
            else:
                self.wrong_config(boundary)
            done = [] if what == "wrong" else self.maintenance(max_commands=max_commands)
            self.check()
            if log is not None:
                said = ", ".join(f"{c}->{code}" for c, code, _ in done) or "no maintenance"
                log(f"[{self.combo.name}] {self.cycle}: {said}; problems so far {len(self.stats.problems)}")
                for text in self.stats.problems[seen:]:
                    log(f"    {text[:300]}")
                seen = len(self.stats.problems)
        self.finish()
        self.stats.wall_s = round(time.time() - t0, 1)
        return self.stats


def long_plan(combo: Combo, kills: int, *, zombie_every: int, wrong_every: int, seed: int) -> list[tuple[str, str]]:
    """Kills cycling through every boundary of the combination (from a seeded start), a zombie
    every ``zombie_every`` cycles (boundaries cycled likewise), a wrong configuration after every
    ``wrong_every``-th kill."""
    rng = random.Random(seed)
    bounds = combo.boundaries
    k0, z0 = rng.randrange(len(bounds)), rng.randrange(len(bounds))
    plan: list[tuple[str, str]] = []
    kill = zombie = 0
    while kill < kills:
        if zombie_every and (kill + zombie) % zombie_every == zombie_every - 1:
            plan.append(("zombie", bounds[(z0 + zombie) % len(bounds)]))
            zombie += 1
            continue
        plan.append(("kill", bounds[(k0 + kill) % len(bounds)]))
        kill += 1
        if wrong_every and kill % wrong_every == 0:
            plan.append(("wrong", ""))
    return plan


# -- many combinations ---------------------------------------------------------------------------


def start_s3() -> tuple[dict, object]:
    """moto's S3 server on 127.0.0.1 (as ``tests/conftest.py`` starts it); its options and server."""
    import logging

    from tests.moto_s3 import S3Server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = S3Server()
    server.start()
    return s3_options(server.endpoint), server


def s3_options(endpoint: str) -> dict:
    return {"endpoint_url": endpoint, "key": "testing", "secret": "testing", "client_kwargs": {"region_name": "us-east-1"}}


def table_root(combo: Combo, work: Path, s3: dict | None) -> str:
    if combo.store == "local":
        return str(work / combo.name)
    import boto3

    bucket = f"seo-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3", endpoint_url=s3["endpoint_url"], aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    ).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/{combo.name}"


def run_matrix(
    plans: dict[Combo, list[tuple[str, str]]],
    *,
    seed: int,
    work: Path,
    s3: dict | None,
    jobs: int = 2,
    max_commands: dict[str, int] | None = None,
    quick: bool = False,
    log=None,
) -> dict:
    """Each combination's plan on a table of its own, ``jobs`` combinations at a time.
    ``max_commands``: per store, the most maintenance commands after a cycle (default 3).
    ``quick``: a zombie's successor and the final writer commit two batches, not a compaction's worth."""
    t0 = time.time()
    results: dict[str, Stats] = {}
    lock = threading.Lock()

    def one(index: int, combo: Combo) -> None:
        campaign = Campaign(combo, table_root(combo, work, s3), s3 if combo.store == "s3" else None, seed + index)
        if quick:
            campaign.successor_batches = campaign.final_batches = 2
        try:
            stats = campaign.run(plans[combo], max_commands=(max_commands or {}).get(combo.store, 3), log=log)
        except Exception as exc:  # noqa: BLE001 - the harness's own failure is reported, not lost
            campaign.stats.problems.append(f"[{campaign.cycle}] harness: {type(exc).__name__}: {exc}")
            stats = campaign.stats
        with lock:
            results[combo.name] = stats

    # the slow ones (S3) first, so that the pool does not end with one of them alone
    order = sorted(enumerate(plans), key=lambda ic: ic[1].store != "s3")
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(lambda ic: one(*ic), order))
    return summarize(results, seed=seed, wall_s=time.time() - t0)


def problem_kinds(results: dict[str, Stats]) -> dict[str, list[str]]:
    """Each kind of problem (its text without numbers, paths and the cycle) -> the combinations."""
    kinds: dict[str, set[str]] = {}
    for name, stats in results.items():
        for text in stats.problems:
            what = re.sub(r"^\[[^]]*\] ", "", text)
            what = re.sub(r"(file|s3)://\S+|/tmp/\S+|\b[0-9a-f]{8}\b|\d+", "#", what)[:220]
            kinds.setdefault(what, set()).add(name)
    return {k: sorted(v) for k, v in sorted(kinds.items(), key=lambda kv: -len(kv[1]))}


def summarize(results: dict[str, Stats], *, seed: int, wall_s: float) -> dict:
    per = {name: dict(vars(s)) for name, s in sorted(results.items())}
    return {
        "seed": seed,
        "combinations": len(results),
        "kills": sum(s.kills for s in results.values()),
        "zombies": sum(len(s.zombies) for s in results.values()),
        "wrong_configs": sum(len(s.wrong_configs) for s in results.values()),
        "maintenance_commands": sum(n for s in results.values() for codes in s.maintenance.values() for n in codes.values()),
        "duplicates": sum(s.duplicates for s in results.values()),
        "losses": sum(s.losses for s in results.values()),
        "missing_files": sum(s.missing_files for s in results.values()),
        "failed_combinations": sorted(n for n, s in results.items() if s.problems),
        "problem_kinds": problem_kinds(results),
        "wall_s": round(wall_s, 1),
        "unsupported": UNSUPPORTED,
        "per_combination": per,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=300, help="kills in all, spread over the combinations")
    p.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    p.add_argument("--jobs", type=int, default=2, help="combinations tortured at once")
    p.add_argument("--combo", action="append", choices=sorted(BY_NAME), help="only these combinations (repeatable)")
    p.add_argument("--zombie-every", type=int, default=4, help="every n-th cycle is a zombie takeover (0: none)")
    p.add_argument("--wrong-every", type=int, default=3, help="after every n-th kill, a restart with a wrong configuration (0: none)")
    p.add_argument("--work", default=None)
    p.add_argument("--keep", action="store_true", help="keep the local tables (always kept with --work)")
    p.add_argument("--out", default=None, help="also write the summary JSON here")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    combos = [BY_NAME[n] for n in args.combo] if args.combo else COMBOS
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="seo-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    s3, server = start_s3() if any(c.store == "s3" for c in combos) else (None, None)
    try:
        per_combo = -(-args.kills // len(combos))
        plans = {
            c: long_plan(c, per_combo, zombie_every=args.zombie_every, wrong_every=args.wrong_every, seed=args.seed + i) for i, c in enumerate(combos)
        }
        summary = run_matrix(plans, seed=args.seed, work=work, s3=s3, jobs=args.jobs, max_commands={"local": 3, "s3": 2}, log=log)
    finally:
        if server is not None:
            server.stop()
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 1 if summary["failed_combinations"] else 0


if __name__ == "__main__":
    sys.exit(main())
