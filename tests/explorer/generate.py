"""Programs from seeds: ``generate(seed)`` is a pure function of the seed (and the profile), so a
program is replayed from its seed alone.

The weights make the seams reviews found reachable in a few actions: a union of the Kafka-like
source with files whose checkpoint is lost and restarted from ``earliest``; a downstream
``readStream`` next to compaction and an idle period; a table directory that already holds
files; a ``query_id`` with a lost checkpoint; kills at every commit boundary of the table's
configuration.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from streaming_exactly_once.testing.faults import COMPACTION_ONLY, ICEBERG_ONLY
from tests.explorer.program import FORMATS, Action, Program, Setup
from tests.explorer.state import FIXED_OPTIONS
from tests.torture.harness import GROUP_BOUNDARIES, boundaries_of


@dataclass(frozen=True)
class Profile:
    """What programs may use: the long run uses everything, the ``make test`` slice less."""

    formats: tuple[str, ...] = FORMATS
    kills: bool = True
    #: share of programs run through Spark Connect (each run a client process with its own server)
    connect: float = 0.025
    min_actions: int = 4
    max_actions: int = 10
    idle: bool = True


EVERYTHING = Profile()
SLICE = Profile(formats=("parquet", "json", "delta"), kills=False, max_actions=7, idle=False, connect=0.0)

SOURCES = [
    (("files",), 30),
    (("kafka",), 20),
    (("files", "kafka"), 22),
    (("rate",), 5),
    (("files", "rate"), 5),
    (("kafka", "rate"), 4),
    (("files", "kafka", "rate"), 4),
]
COMPACTABLE = ("parquet", "delta", "iceberg", "delta+iceberg")


def pick(rng: random.Random, weighted: list[tuple[object, int]]) -> object:
    return rng.choices([v for v, _ in weighted], weights=[w for _, w in weighted])[0]


def generate(seed: int, profile: Profile = EVERYTHING) -> Program:
    rng = random.Random(seed * 7919 + 17)
    setup = make_setup(rng, profile)
    n = rng.randint(profile.min_actions, profile.max_actions)
    if rng.random() < profile.connect:  # every run starts a Connect server: short programs
        setup = connect_setup(seed, setup)
        n = min(n, 4)
    actions = [produce(rng, setup, files=(1, 3), rows=(2, 6), kafka=(2, 8)), Action.of("run", sink="new", max_files=2)]
    while len(actions) < n:
        actions.append(make_action(rng, setup, profile))
    setup, actions = lagging_consumer(seed, setup, downstream_failure(seed, setup, actions))
    return Program(seed, setup, tuple(restored_checkpoint(seed, setup, actions)))


#: the first seed whose programs may put a checkpoint back to an older copy: the programs of the
#: seeds before it, which results and docs name, stay as they were
RESTORES_FROM = 70000


def restored_checkpoint(seed: int, setup: Setup, actions: list[Action]) -> list[Action]:
    """A third of the programs (from ``RESTORES_FROM``, without the rate source, whose rows follow
    the checkpoint's offsets) put the checkpoint back to its copy of a run or two before the last,
    then produce and run: the query re-plans batches the table holds. From a random source of its own."""
    rng = random.Random(seed * 2750159 + 5)
    runs = [i for i, a in enumerate(actions) if a.kind == "run"]
    if seed < RESTORES_FROM or "rate" in setup.sources or len(runs) < 2 or rng.random() >= 0.35:
        return actions
    at = rng.randint(runs[1] + 1, len(actions))  # after the second run: a copy before the last
    restore = Action.of("restore_checkpoint", back=rng.choice([1, 1, 2]))
    more = [produce(rng, setup, files=(1, 2), rows=(1, 4), kafka=(1, 4)), Action.of("run", sink=rng.choice(["new", "same"]), max_files=2)]
    return [*actions[:at], restore, *more, *actions[at:]]


def connect_setup(seed: int, setup: Setup) -> Setup:
    """A Spark Connect program: most leave the rate source out (a rate query runs batches until
    it is stopped, each in the server's worker), and compaction comes at every second batch, so
    a program of four actions reaches it. From a random source of its own."""
    rng = random.Random(seed * 32452843 + 7)
    sources = setup.sources if rng.random() < 0.4 else tuple(s for s in setup.sources if s != "rate") or ("files",)
    return replace(setup, connect=True, sources=sources, compact_interval=2 if setup.compaction else setup.compact_interval)


def downstream_failure(seed: int, setup: Setup, actions: list[Action]) -> list[Action]:
    """A third of the programs with a downstream query get a batch of it that fails after Spark
    planned it (a consumer's in-flight batch while maintenance runs). Drawn from a random source
    of its own, so the programs of every other seed stay as they were."""
    rng = random.Random(seed * 104729 + 3)
    if setup.downstream is None or rng.random() >= 0.35:
        return actions
    at = rng.randint(2, len(actions))  # after the first run
    return [*actions[:at], Action.of("downstream_fail"), *actions[at:]]


def lagging_consumer(seed: int, setup: Setup, actions: list[Action]) -> tuple[Setup, list[Action]]:
    """A registered consumer of an unpartitioned Parquet table that reads two files per batch
    falls behind (stopped while four runs commit one file each, seconds apart), comes back,
    commits its first batch and fails in its second - planned over files of different ages -
    and stops again; then ``seo compact``, a few batches (the table keeps one batch of history)
    and ``seo gc`` run before it restarts. Compaction must leave the planned batch's files alone (its restart reads them by
    path). From a random source of its own: the programs of every other seed stay as they were."""
    rng = random.Random(seed * 15485863 + 11)
    eligible = setup.downstream == "registered" and setup.format == "parquet" and "rate" not in setup.sources and not setup.connect
    if not eligible or rng.random() >= 0.7:
        return setup, actions
    at = rng.randint(2, len(actions))  # after the first run
    rows = {"files": 1, "rows": 4} if "files" in setup.sources else {}
    rows |= {"kafka": 4} if "kafka" in setup.sources else {}
    snippet = [Action.of("downstream_pause")]
    snippet += [Action.of("produce", **rows), Action.of("run", sink="new", max_files=2), Action.of("idle", seconds=2)] * 4
    snippet += [Action.of("downstream_fail", after=1), Action.of("downstream_pause"), Action.of("maintain", cmd="compact")]
    snippet += [Action.of("produce", **rows), Action.of("run", sink="new", max_files=2)] * 3  # the history moves past the rewrite
    snippet += [Action.of("maintain", cmd="gc-short"), Action.of("downstream_resume")]
    return replace(setup, partitioned=False, downstream_max_files=2, history=1), [*actions[:at], *snippet, *actions[at:]]


def make_setup(rng: random.Random, profile: Profile) -> Setup:
    sources = pick(rng, SOURCES)
    fmt = rng.choice([f for f in profile.formats])
    table_format = fmt in ("delta", "iceberg", "delta+iceberg")
    compaction = fmt in COMPACTABLE and rng.random() < 0.35
    private = table_format and rng.random() < 0.25
    evolutions = ["none", "add_columns"] if table_format else ["none", "add_columns", "add_and_widen"]
    group = rng.random() < 0.18  # a group's outputs take every format (docs/datasets.md, docs/iceberg.md)
    private = private and not group
    downstream = None if private else pick(rng, [(None, 60), ("unregistered", 22), ("registered", 18 if compaction else 0)])
    setup = Setup(
        sources=tuple(sources),  # type: ignore[arg-type]
        format=fmt,
        partitioned=rng.random() < 0.6,
        staging="rename" if group else rng.choice(["rename", "rename", "direct"]),
        private_manifest=private,
        compaction=compaction,
        compact_interval=rng.randint(2, 4),
        schema_evolution=rng.choice(evolutions),
        query_id=rng.random() < 0.15,
        filter=rng.random() < 0.3,
        downstream=downstream,  # type: ignore[arg-type]
        fail_on_data_loss="kafka" in sources and rng.random() < 0.3,  # type: ignore[operator]
        foreign_files=rng.random() < 0.08,  # a group's root refuses them, and adopts none
        attach="foreachBatch" if rng.random() < 0.25 else "start",
        group=group,
        gate=group and rng.random() < 0.6,
        policy=rng.choice(["full", "partial"]),
    )
    if "iceberg" in fmt and setup.partitioned and downstream:  # Spark refuses it (docs/iceberg.md)
        setup = replace(setup, downstream=None)
    return setup


def make_action(rng: random.Random, setup: Setup, profile: Profile) -> Action:
    kafka = "kafka" in setup.sources
    choices: list[tuple[str, int]] = [
        ("produce", 28),
        ("run", 24),
        ("lose_checkpoint", 7),
        ("replay", 4),
        ("kill", 9 if profile.kills else 0),
        ("zombie", 3 if profile.kills else 0),
        ("fail", 4),
        ("maintain", 9),
        ("change", 4),
        ("evolve", 4),
        ("kafka", 6 if kafka else 0),
        ("idle", 4 if profile.idle else 0),
    ]
    kind = str(pick(rng, choices))  # type: ignore[arg-type]
    if kind == "produce":
        return produce(rng, setup, files=(1, 2), rows=(1, 5), kafka=(1, 6))
    if kind == "run":
        return Action.of("run", sink=rng.choice(["new", "new", "same"]), max_files=rng.randint(1, 3))
    if kind == "lose_checkpoint":
        return Action.of("lose_checkpoint", start=rng.choice(["earliest", "earliest", "table", "latest"]))
    if kind == "kill":
        if rng.random() < 0.25:
            return Action.of("kill", delay=round(rng.uniform(0.3, 4.0), 1))
        return Action.of("kill", boundary=pick_boundary(rng, setup))
    if kind == "zombie" and setup.connect:
        return Action.of("kill", boundary=pick_boundary(rng, setup))
    if kind == "zombie":
        return Action.of("zombie", boundary=pick_boundary(rng, setup).split("+")[0])
    if kind == "fail":
        return Action.of("fail", boundary=pick_boundary(rng, setup).split("+")[0])
    if kind == "maintain":
        cmd = rng.choice(["verify", "gc", "gc-dry", "recover", "compact", "audit"])
        return Action.of("maintain", cmd=cmd)
    if kind == "change":
        return make_change(rng, setup)
    if kind == "evolve":
        return Action.of("evolve", kind=rng.choice(["add", "add", "widen", "drop_offsets" if kafka else "add", "keep_offsets" if kafka else "add"]))
    if kind == "kafka":
        return Action.of("kafka", op=rng.choice(["grow", "grow", "expire-read", "expire-unread", "recreate"]), topic=rng.choice(["a", "b"]))
    if kind == "replay":
        return Action.of("replay")
    assert kind == "idle", kind
    return Action.of("idle", seconds=rng.choice([2, 4, 5]))


def produce(rng: random.Random, setup: Setup, *, files: tuple[int, int], rows: tuple[int, int], kafka: tuple[int, int]) -> Action:
    """New records for the program's sources (a rate source makes its own)."""
    args = {}
    if "files" in setup.sources:
        args.update(files=rng.randint(*files), rows=rng.randint(*rows))
    if "kafka" in setup.sources:
        args.update(kafka=rng.randint(*kafka))
    if setup.group and rng.random() < 0.4:
        args.update(bad=rng.randint(1, 2))
    if setup.group and setup.gate and rng.random() < 0.12:
        args.update(poison=1)
    return Action.of("produce", **args)


def pick_boundary(rng: random.Random, setup: Setup) -> str:
    formats = setup.format.split("+")
    names = boundaries_of(setup.staging, delta="delta" in formats, evolve=setup.schema_evolution != "none")
    if setup.group:
        names = list(GROUP_BOUNDARIES)
    if "iceberg" in formats:
        names += list(ICEBERG_ONLY)
    if setup.compaction:
        names += list(COMPACTION_ONLY)
    name = rng.choice(names)
    if "+" not in name and rng.random() < 0.3:
        name = f"{name}@{rng.randint(2, 3)}"
    return name


def make_change(rng: random.Random, setup: Setup) -> Action:
    """An option changed between restarts: one a table accepts, or one it fixed at creation."""
    allowed = [("query_id", not setup.query_id)] + ([] if setup.group else [("staging", "direct" if setup.staging == "rename" else "rename")])
    if setup.format in COMPACTABLE:
        allowed.append(("compaction", not setup.compaction))
    evolutions = ["none", "add_columns"] if setup.format in ("delta", "iceberg", "delta+iceberg") else ["none", "add_columns", "add_and_widen"]
    allowed.append(("schema_evolution", rng.choice(evolutions)))
    refused = [("partitioned", not setup.partitioned), ("compact_interval", setup.compact_interval + 1)]
    refused.append(("format", rng.choice([f for f in FORMATS if f != setup.format])))
    if setup.format in ("delta", "iceberg", "delta+iceberg"):
        refused.append(("private_manifest", not setup.private_manifest))
    option, value = rng.choice(allowed if rng.random() < 0.6 else refused)
    return Action.of("change", option=option, value=value)


def program_features(program: Program) -> set[str]:
    """The features a program asks for, from its setup and actions (what it exercised, which is
    what coverage counts, is in its result): the long run's ``--guided`` choice of seeds."""
    s = program.setup
    out = {f"source:{x}" for x in s.sources} | {f"table:{s.format}", "reader:arrow", "reader:as_of"}
    out |= {"table:partitioned" if s.partitioned else "table:unpartitioned", f"staging:{s.staging}"}
    flags = {
        "source:union": len(s.sources) > 1,
        "table:private-manifest": s.private_manifest,
        "maint:in-stream-compaction": s.compaction,
        "query:filter": s.filter,
        "query_id": s.query_id,
        "table:pre-existing-files": s.foreign_files,
        "table:adopted": s.foreign_files and not s.group and s.format != "json",  # after ExistingFilesError
        "life:foreachBatch": s.attach == "foreachBatch",
        "group": s.group,
        "life:connect": s.connect,
        "reader:spark.read": not s.private_manifest,
        "reader:delta-rs": "delta" in s.format,
        "reader:pyiceberg": "iceberg" in s.format,
        f"downstream:{s.downstream}": s.downstream is not None,
        "reader:readStream": s.downstream is not None,
    }
    out |= {k for k, v in flags.items() if v}
    runs, topics = 0, {"a"}
    for a in program.actions:
        if a.kind == "kafka" and a.arg("op") == "recreate" and a.arg("topic") not in topics:
            continue  # a topic nobody created yet: nothing to delete (``do_kafka``)
        if a.kind == "kafka" and a.arg("op") == "grow":
            topics.add(a.arg("topic"))
        out |= _action_features(a, s, runs)
        runs += a.kind in ("run", "kill", "fail", "zombie")
    return out


def _action_features(a: Action, s: Setup, runs: int) -> set[str]:
    simple = {
        "downstream_fail": "downstream:failed-batch",
        "replay": "life:replay",
        "idle": "life:idle",
        "restore_checkpoint": "life:restored-checkpoint",
    }
    simple |= {"kill": "life:kill", "fail": "life:injected-failure", "zombie": "life:zombie"}
    if a.kind == "replay" and runs < (2 if s.foreign_files else 1):
        return set()  # nothing committed to replay yet: another tool's files refuse the first run
    if a.kind in simple:
        return {simple[a.kind]}
    if a.kind == "run":
        return {"life:restart", "life:same-sink-object" if a.arg("sink") == "same" else "life:new-sink-object"} if runs else set()
    if a.kind == "lose_checkpoint":
        return {f"life:lost-checkpoint-{a.arg('start')}"}
    if a.kind == "maintain":
        return {f"maint:{a.arg('cmd').split('-')[0]}"}
    if a.kind == "change":
        return {"change:option-refused" if a.arg("option") in FIXED_OPTIONS else "change:option-allowed"}
    if a.kind == "evolve":
        kind = a.arg("kind")
        refused = (kind == "add" and s.schema_evolution == "none") or (kind == "widen" and s.schema_evolution != "add_and_widen")
        changed = {"change:add-column"} if kind == "add" else {"change:widen"} if kind == "widen" else set()
        return {"query:projection"} | ({"change:refused-batch"} if refused and runs else changed)
    if a.kind == "kafka":
        return {{"grow": "kafka:grow-partition", "recreate": "kafka:recreate-topic"}.get(a.arg("op"), "kafka:expire")}
    if a.kind == "produce":
        return ({"group:quarantine"} if a.arg("bad") else set()) | ({"group:gate"} if a.arg("poison") and s.gate else set())
    return set()
