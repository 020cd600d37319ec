"""A program of the scenario explorer: the table and query a user sets up, then a list of actions.

A program is data, so that it can be generated from a seed, printed as a listing a person can
follow, saved as JSON and replayed exactly (``Program.from_json``). Every action is interpreted
against the state the earlier ones left (``tests.explorer.interpreter``): an action that does not
apply there (a kill with no input to commit, a replay before any batch) does nothing, so any
sub-list of a program is a program too - which is what the shrinker relies on.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

#: table formats a program may write (``format=``; ``delta+iceberg`` is ``["delta", "iceberg"]``)
FORMATS = ("parquet", "json", "delta", "iceberg", "delta+iceberg")


@dataclass(frozen=True)
class Setup:
    """What the user configured before the first action; option-change actions alter a copy."""

    #: the query's sources, unioned by name: ``files`` (JSON files), ``kafka`` (the offset
    #: source with Kafka's columns, ``streaming_exactly_once.testing.fake_kafka``), ``rate`` (``rate-micro-batch``)
    sources: tuple[str, ...] = ("files",)
    format: str = "parquet"
    partitioned: bool = True
    staging: str = "rename"
    #: ``spark_manifest=False`` (Delta and Iceberg tables only): the manifest in ``_seo/manifest``
    private_manifest: bool = False
    #: in-stream compaction (small ``compact_interval``, ``min_files`` 2, a ``min_age`` of seconds)
    compaction: bool = False
    compact_interval: int = 3
    schema_evolution: str = "none"
    #: the sink's ``query_id`` option is set (one id for every checkpoint of the program)
    query_id: bool = False
    #: the query filters rows (``v % 5 <> 0``): filtered records must never reach the table
    filter: bool = False
    #: a downstream ``readStream`` of the table: ``None``, ``"registered"`` (a compaction
    #: consumer) or ``"unregistered"``; caught up after every step
    downstream: str | None = None
    #: the downstream query's ``maxFilesPerTrigger`` (0: Spark's default, every new file in one
    #: batch): with a few, one of its catch-ups is several batches, and a later one can fail
    #: after an earlier one committed
    downstream_max_files: int = 0
    #: the table's ``min_batches_to_retain`` with no ``cleanup_delay`` (0: the defaults, 100
    #: batches): a short history lets ``seo gc`` delete what compaction replaced
    history: int = 0
    #: the Kafka-like source's ``failOnDataLoss``
    fail_on_data_loss: bool = False
    #: the table directory already holds a Parquet file another tool wrote before the first run
    foreign_files: bool = False
    #: how the query gets the sink: ``start`` (``sink.start``) or ``foreachBatch``
    #: (``writeStream.foreachBatch(sink)`` with the sink's ``checkpoint_location`` option)
    attach: str = "start"
    #: a dataset group (``DatasetSink``) instead of one table: outputs ``all`` and ``byp`` (one
    #: table per ``p``), a row check with its quarantine, and (``gate``) a mandatory batch check
    group: bool = False
    gate: bool = False
    policy: str = "full"
    #: every run of the query is a Spark Connect client in a driver process of its own
    connect: bool = False

    def describe(self) -> str:
        parts = ["+".join(self.sources), "->", self.format]
        parts += ["partitioned" if self.partitioned else "unpartitioned", self.staging]
        flags = {
            "private-manifest": self.private_manifest,
            f"compaction/{self.compact_interval}": self.compaction,
            f"evolution={self.schema_evolution}": self.schema_evolution != "none",
            "query_id": self.query_id,
            "filter": self.filter,
            f"downstream={self.downstream}": self.downstream is not None,
            f"downstream-maxFilesPerTrigger={self.downstream_max_files}": self.downstream_max_files > 0,
            f"history={self.history}": self.history > 0,
            "failOnDataLoss": self.fail_on_data_loss,
            "foreign-files": self.foreign_files,
            "foreachBatch": self.attach == "foreachBatch",
            f"group(policy={self.policy}{', gate' if self.gate else ''})": self.group,
            "connect": self.connect,
        }
        return " ".join(parts + [name for name, on in flags.items() if on])


@dataclass(frozen=True)
class Action:
    """One user action: a kind (``tests.explorer.interpreter`` has one handler per kind) and its
    arguments (JSON values)."""

    kind: str
    args: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def of(kind: str, /, **args: Any) -> Action:
        return Action(kind, tuple(sorted(args.items())))

    def arg(self, name: str, default: Any = None) -> Any:
        return dict(self.args).get(name, default)

    def describe(self) -> str:
        return " ".join([self.kind] + [f"{k}={v}" for k, v in self.args])


@dataclass(frozen=True)
class Program:
    seed: int
    setup: Setup
    actions: tuple[Action, ...] = field(default_factory=tuple)

    def listing(self) -> str:
        """The program as a person reads it: its setup, then one numbered action per line."""
        lines = [f"program seed={self.seed}: {self.setup.describe()}"]
        lines += [f"  {i:2d}. {a.describe()}" for i, a in enumerate(self.actions, 1)]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "setup": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self.setup).items()},
            "actions": [[a.kind, dict(a.args)] for a in self.actions],
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> Program:
        known = {f.name for f in fields(Setup)}
        setup_fields = {k: tuple(v) if isinstance(v, list) else v for k, v in data["setup"].items() if k in known}
        actions = tuple(Action.of(kind, **args) for kind, args in data["actions"])
        return Program(int(data["seed"]), Setup(**setup_fields), actions)

    def dumps(self) -> str:
        """JSON a person can read: the setup on one line, one line per action."""
        data = self.to_json()
        actions = ",\n".join(f"  {json.dumps(a, sort_keys=True)}" for a in data["actions"])
        return f'{{"seed": {self.seed},\n "setup": {json.dumps(data["setup"], sort_keys=True)},\n "actions": [\n{actions}\n ]}}'

    def with_actions(self, actions: tuple[Action, ...] | list[Action]) -> Program:
        return replace(self, actions=tuple(actions))

    def with_setup(self, **changes: Any) -> Program:
        return replace(self, setup=replace(self.setup, **changes))
