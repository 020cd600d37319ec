"""After every step: every reader of every table against the model.

* the latest state - ``read.arrow`` of the table with its quarantine tables against the model
  (``Model.check``), rows where they belong (``placement``), vanilla ``spark.read`` equal to
  ``read.arrow``, delta-rs and pyiceberg at their latest version equal to it or one batch behind
  (a writer killed between the manifest step and the table format's step; the next writer or
  ``seo recover`` completes it), and never losing a row they showed;
* time travel - ``read.arrow`` as of every retained batch, delta-rs at every Delta version,
  pyiceberg at every snapshot: each row once, each state contained in the next, a batch's
  Delta version and Iceberg snapshot reading as its ``as_of``, and a state once read never
  changing (``gc`` must not take files time travel still needs);
* a downstream ``readStream`` of the table, caught up after every step: each row once, and
  exactly the table.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streaming_exactly_once.config import parse_duration_ms
from tests.explorer import readers
from tests.explorer.foreign import FOREIGN_NAME
from tests.explorer.model import Failure, compare
from tests.explorer.state import COMPACTION, DOWNSTREAM_MAX_FILE_AGE
from tests.explorer.tables import TableSpec, has_manifest, is_bad, is_poison, tables_of

if TYPE_CHECKING:
    from tests.explorer.interpreter import Interpreter

#: what the downstream query's failing batch raises (``Downstream.fail_next``)
DOWNSTREAM_FAILURE = "explorer: the downstream batch fails after Spark planned it"


@dataclass
class History:
    """What each past state of one table read the first time it was checked (never to change),
    and the rows each table-format reader showed at its latest version (never to go)."""

    as_of: dict[int, frozenset[str]] = field(default_factory=dict)
    delta: dict[int, frozenset[str]] = field(default_factory=dict)
    iceberg: dict[int, frozenset[str]] = field(default_factory=dict)
    format_ack: dict[str, set[str]] = field(default_factory=lambda: {"delta": set(), "iceberg": set()})


class CachedReaders:
    """The readers of ``readers``, each answer kept while nothing under the table directory
    changed (``readers.stamp``): a step that leaves the table alone (new input, an idle period,
    an option change) re-checks the same answers against the model without reading again."""

    def __init__(self) -> None:
        self._stamp: object = None
        self._answers: dict[tuple[Any, ...], Any] = {}

    @property
    def stamp_now(self) -> object:
        return self._stamp

    def expire_unless(self, stamp: object) -> None:
        if stamp != self._stamp:
            self._stamp, self._answers = stamp, {}

    def __getattr__(self, name: str) -> Any:
        read = getattr(readers, name)

        def cached(*args: Any, **kwargs: Any) -> Any:
            key = (name, *args, *sorted(kwargs.items()))
            if key not in self._answers:
                self._answers[key] = read(*args, **kwargs)
            answer = self._answers[key]
            return answer.copy() if isinstance(answer, (Counter, list)) else answer

        return cached


class Checker:
    def __init__(self, it: Interpreter) -> None:
        self.it = it
        self.history: dict[str, History] = {}
        self.read = CachedReaders()

    @property
    def formats(self) -> set[str]:
        created = self.it.table.created or self.it.setup
        return set(created.format.split("+"))

    def after_step(self, *, full: bool = False, complete: bool | None = None) -> list[Failure]:
        it = self.it
        self.read.expire_unless(readers.stamp(it.world.table))
        if not has_manifest(it):
            return self._no_table(it.step)
        failures: list[Failure] = []
        for spec in tables_of(it):
            failures += self._table(spec, full=full, complete=complete)
        return failures

    def _table(self, spec: TableSpec, *, full: bool, complete: bool | None) -> list[Failure]:
        it, step = self.it, self.it.step
        table = spec.path
        with it.timed("check:arrow"):
            latest = self.read.arrow(table) if readers.readable(table) else Counter()
            quarantined = [self.read.arrow(q) if readers.readable(q) else Counter() for q in spec.quarantine or ()]
        union = sum(quarantined, Counter(latest))
        it.feature("reader:arrow")
        name = "arrow" if spec.name == "table" else f"arrow {spec.name}"
        failures = it.model.check(name, union, step, table=spec.name, routed=spec.routed, complete=complete)
        failures += self._placement(spec, latest, quarantined, step)
        if readers.readable(table):
            created = it.table.created or it.setup
            if not created.private_manifest:
                fmt = "json" if created.format == "json" else "parquet"
                with it.timed("check:spark.read"):
                    failures += compare(f"spark.read {spec.name}", self.read.vanilla(it.spark, table, fmt), latest, step)
                it.feature("reader:spark.read")
            history = self.history.setdefault(spec.name, History())
            with it.timed("check:formats"):
                failures += self._formats_latest(spec, history, latest, step)
            with it.timed("check:history"):
                failures += self._time_travel(spec, history, latest, step, full=full)
            if it.downstream is not None and spec.main and not created.private_manifest:
                with it.timed("check:downstream"):
                    failures += it.downstream.catch_up(it, latest, step, self.read.stamp_now)
        if not failures:
            it.model.observe(spec.name, union)
        return failures

    def _placement(self, spec: TableSpec, latest: Counter, quarantined: list[Counter], step: int) -> list[Failure]:
        """A group's rows where they belong: a row failing the row check only in the row
        quarantine, a row failing the gate never in the table (until the gate is lifted), and a
        batch quarantine only under ``policy="partial"``."""
        if spec.quarantine is None:
            return []
        it, records = self.it, self.it.world.records
        out = []
        wrong = {i for i in latest if i in records and (is_bad(records[i]) or (is_poison(records[i]) and it.query.gate))}
        if wrong:
            out.append(Failure("quarantine", f"arrow {spec.name}", f"rows a check must keep out of the table: {sorted(wrong)[:6]}", step))
        rows_q, batches_q = quarantined
        if rows_q:
            it.feature("group:quarantine")
        innocent = {i for i in rows_q if i in records and not is_bad(records[i])}
        if innocent:
            out.append(Failure("quarantine", f"row quarantine {spec.name}", f"rows that pass the row check: {sorted(innocent)[:6]}", step))
        if batches_q and (it.table.created or it.setup).policy != "partial":
            out.append(Failure("quarantine", f"batch quarantine {spec.name}", "a batch quarantined under policy='full'", step))
        if batches_q:
            it.feature("group:gate")
        return out

    def _no_table(self, step: int) -> list[Failure]:
        """No table yet: the directory reads as whatever was there before the sink came."""
        it = self.it
        if not it.setup.foreign_files or not it.model.foreign_kept:
            return []
        got = self.read.vanilla(it.spark, it.world.table, "parquet")
        foreign = Counter(r.id for r in it.world.records.values() if r.source == "foreign")
        return compare("spark.read (no table yet)", got, foreign, step, kind="lost")

    def _formats_latest(self, spec: TableSpec, history: History, latest: Counter, step: int) -> list[Failure]:
        it, table = self.it, spec.path
        out: list[Failure] = []
        views = {}
        if "delta" in self.formats and (table / "_delta_log").is_dir():
            views["delta"] = self.read.delta(table)
        if "iceberg" in self.formats and (table / "metadata" / "version-hint.text").exists():
            views["iceberg"] = self.read.iceberg(table)
        if not views:
            return out
        behind = self._previous_batch(table)
        for name, got in views.items():
            it.feature("reader:delta-rs" if name == "delta" else "reader:pyiceberg")
            reader = f"{name} {spec.name}"
            out += it.model.check_subset(reader, got, step, spec.routed)
            if got != latest and (it.model.settled or not (set(behind) <= set(got) <= set(latest))):
                out += compare(reader, got, latest, step)
            gone = history.format_ack[name] - set(got)
            if gone:
                out.append(Failure("lost", reader, f"rows it showed before are gone: {sorted(gone)[:6]}", step))
            history.format_ack[name] |= set(got)
        return out

    def _time_travel(self, spec: TableSpec, history: History, latest: Counter, step: int, *, full: bool) -> list[Failure]:
        it, table = self.it, spec.path
        out: list[Failure] = []
        batches = self.read.retained_batches(table)
        todo = batches if full else [b for b in batches if b not in history.as_of][-3:]
        if todo:
            it.feature("reader:as_of")
        if it.setup.compaction and batches and batches[-1] + 1 >= it.setup.compact_interval:
            it.feature("maint:in-stream-compaction")
        out += _chain(it, f"arrow {spec.name} as_of", batches, todo, lambda b: self.read.arrow(table, as_of=b), history.as_of, spec, step)
        if batches and frozenset(latest) != history.as_of.get(batches[-1], frozenset(latest)):
            out.append(Failure("as_of-latest", f"arrow {spec.name}", _diff(history.as_of[batches[-1]], frozenset(latest)), step))
        if "delta" in self.formats:
            versions = self.read.delta_versions(table)
            todo_v = versions if full else [v for v in versions if v not in history.delta]
            out += _chain(it, f"delta {spec.name}@", versions, todo_v, lambda v: self.read.delta(table, v), history.delta, spec, step)
            out += self._batch_versions("delta", spec, history, batches, todo, step)
        if "iceberg" in self.formats:
            snaps = [s for s, _ in self.read.iceberg_snapshots(table)]
            todo_s = snaps if full else [s for s in snaps if s not in history.iceberg]
            out += _chain(it, f"iceberg {spec.name}@", snaps, todo_s, lambda s: self.read.iceberg(table, s), history.iceberg, spec, step)
            out += self._batch_versions("iceberg", spec, history, batches, todo, step)
        return out

    def _batch_versions(self, name: str, spec: TableSpec, history: History, batches: list[int], todo: list[int], step: int) -> list[Failure]:
        """A batch's own Delta version / Iceberg snapshot reads as ``as_of`` that batch."""
        it, table, out = self.it, spec.path, []
        for b in todo:
            try:
                if name == "delta":
                    v = self.read.delta_version_of(table, b)
                    got = self.read.delta(table, v) if v is not None else None
                else:
                    got = self.read.iceberg(table, self.read.iceberg_snapshot_of(table, b))
            except Exception as exc:
                if b == batches[-1] and not it.model.settled:
                    continue  # its table-format step may still be pending after a kill
                if not history.as_of.get(b) and "nor does any batch before it" in str(exc):
                    continue  # empty as of b, before the format's first commit: it has none of b
                out.append(Failure("time-travel", f"{name} {spec.name} of batch {b}", f"{type(exc).__name__}: {exc}"[:400], step))
                continue
            if got is not None and frozenset(got) != history.as_of.get(b):
                out.append(Failure("time-travel", f"{name} {spec.name} of batch {b}", _diff(history.as_of.get(b, frozenset()), frozenset(got)), step))
        return out

    def _previous_batch(self, table: Path) -> Counter:
        batches = self.read.retained_batches(table)
        return self.read.arrow(table, as_of=batches[-2]) if len(batches) > 1 else Counter()

    def foreign_files(self) -> None:
        """Before the first action: Parquet files another tool wrote in the table directory, in
        the table's layout (``p=<value>/`` directories if partitioned) and with the columns the
        query writes (Kafka's null for them)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        it = self.it
        records = it.world.add_foreign(6)
        columns: dict[str, Any] = {"id": pa.string(), "p": pa.string(), "v": pa.int32()}
        if "kafka" in it.setup.sources:
            columns.update(topic=pa.string(), partition=pa.int32(), offset=pa.int64())
        groups = {r.p: [x for x in records if x.p == r.p] for r in records} if it.setup.partitioned else {"": records}
        for p, rows in groups.items():
            where = it.world.table / (f"p={p}" if p else "")
            where.mkdir(parents=True, exist_ok=True)
            data = {"id": [r.id for r in rows], "p": [r.p for r in rows], "v": [r.v for r in rows]}
            data.update({c: [None] * len(rows) for c in columns if c not in data})
            table = pa.table({c: pa.array(values, columns[c]) for c, values in data.items()})
            pq.write_table(table.drop_columns(["p"]) if p else table, where / FOREIGN_NAME)
        it.model.observe("table", Counter(r.id for r in records))
        it.feature("table:pre-existing-files")


def _chain(
    it: Interpreter, reader: str, keys: list[int], todo: list[int], read: Any, seen: dict[int, frozenset[str]], spec: TableSpec, step: int
) -> list[Failure]:
    """Past states in order: each row once, only rows the table may hold, each state contained
    in the next, and each unchanged since it was first read."""
    out: list[Failure] = []
    previous: frozenset[str] | None = None
    for k in keys:
        if k not in todo:
            previous = seen.get(k, previous)
            continue
        got = read(k)
        out += it.model.check_subset(f"{reader}{k}", got, step, spec.routed)
        ids = frozenset(got)
        if k in seen and seen[k] != ids:
            out.append(Failure("history-changed", f"{reader}{k}", _diff(seen[k], ids), step))
        if previous is not None and not previous <= ids:
            out.append(Failure("history-shrank", f"{reader}{k}", f"rows of an earlier state missing: {sorted(previous - ids)[:6]}", step))
        seen.setdefault(k, ids)
        previous = ids
    return out


def _diff(want: frozenset[str], got: frozenset[str]) -> str:
    return f"missing {sorted(want - got)[:6]}, extra {sorted(got - want)[:6]}"


class Downstream:
    """A downstream ``spark.readStream`` of the table (file source), run to the end of what the
    table holds after every step on its own checkpoint, collecting every row it reads."""

    def __init__(self, checkpoint: Path, max_files: int = 0) -> None:
        self.checkpoint = checkpoint
        self.seen: Counter = Counter()
        #: its next batch raises in ``foreachBatch`` (``do_downstream_fail``): planned, not committed
        self.fail_next = False
        #: the table's ``readers.stamp`` when it last ran to the end with no batch left planned
        self.caught_up_at: object = None
        #: the failing batch is the one after this many batches of its run committed
        self.fail_after = 0
        #: stopped (``do_downstream_pause``): no catch-up until it comes back
        self.paused = False
        #: its ``maxFilesPerTrigger`` (0: none)
        self.max_files = max_files
        #: the newest file timestamp (ms) and the table's latest batch when it last caught up
        self.horizon_ms = 0
        self.horizon_batch = -1

    def catch_up(self, it: Interpreter, latest: Counter, step: int, stamp: object = None) -> list[Failure]:
        if not latest or self.paused:
            return []
        if stamp is not None and stamp == self.caught_up_at and not self.fail_next:
            return self._compare(it, latest, step)  # the table did not change: no new batch to read
        created = it.table.created or it.setup
        table = tables_of(it)[0].path
        lagged = it.setup.downstream == "unregistered" and self._lagged(table)
        reader = it.spark.readStream.schema("id STRING").option("maxFileAge", DOWNSTREAM_MAX_FILE_AGE)
        reader = reader.format("json" if created.format == "json" else "parquet")
        if self.max_files:
            reader = reader.option("maxFilesPerTrigger", self.max_files)
        got: list[str] = []
        batches: list[int] = []

        def collect(df: Any, batch: int) -> None:
            if self.fail_next and len(batches) >= self.fail_after:
                raise RuntimeError(DOWNSTREAM_FAILURE)
            got.extend(r.id for r in df.select("id").collect())
            batches.append(batch)

        try:
            query = reader.load(str(table)).writeStream.foreachBatch(collect).option("checkpointLocation", str(self.checkpoint))
            query = query.trigger(availableNow=True).start()
            query.awaitTermination(240)
        except Exception as exc:
            if self.fail_next and DOWNSTREAM_FAILURE in str(exc):  # its rows are read again at the restart
                self.seen.update(got)  # the batches before it committed
                self.fail_next = False
                self.caught_up_at = None
                it.feature("downstream:failed-batch")
                return []
            text = str(exc).strip().splitlines()
            return [Failure("downstream-error", "readStream", (text[0] if text else type(exc).__name__)[:300], step)]
        if query.isActive:
            query.stop()
            return [Failure("downstream", "readStream", "the downstream query did not finish in time", step)]
        self.seen.update(got)
        self.caught_up_at = stamp
        self._note_horizon(table)
        if lagged:  # the documented limit: each row at least once, no row it may not hold
            it.say("    (the unregistered downstream lagged beyond the compaction's age floor: rows may repeat)")
            self.seen = Counter(set(self.seen))
        return self._compare(it, latest, step)

    def _note_horizon(self, table: Path) -> None:
        from streaming_exactly_once.manifest.manifest_log import ManifestLog
        from streaming_exactly_once.storage import open_storage

        manifest = ManifestLog(open_storage(str(table)))
        latest = manifest.latest_batch_id()
        if latest is not None:
            self.horizon_batch = latest
            self.horizon_ms = max([self.horizon_ms, *(e.modification_time for e in manifest.files(as_of=latest))])

    def _lagged(self, table: Path) -> bool:
        """Whether a compaction batch since its last catch-up rewrote files while it lagged more
        than ``min_age - maxFileAge`` behind the table's newest file (docs/design/data-compaction.md:
        the limit of an unregistered downstream query, whose rows may then repeat)."""
        from streaming_exactly_once import read
        from streaming_exactly_once.manifest.manifest_log import ManifestLog
        from streaming_exactly_once.storage import open_storage

        allowed_ms = (parse_duration_ms(COMPACTION["min_age"], key="min_age") or 0) - (
            parse_duration_ms(DOWNSTREAM_MAX_FILE_AGE, key="maxFileAge") or 0
        )
        try:
            batches = [b.batch_id for b in read.batches(str(table)) if b.batch_id > self.horizon_batch and b.rewritten_files]
        except Exception:  # no table yet
            return False
        manifest = ManifestLog(open_storage(str(table)))
        for k in batches:
            newest = max((e.modification_time for e in manifest.files(as_of=k - 1)), default=0)
            if newest - allowed_ms > self.horizon_ms:
                return True
        return False

    def _compare(self, it: Interpreter, latest: Counter, step: int) -> list[Failure]:
        it.feature(f"downstream:{it.setup.downstream}", "reader:readStream")
        out = it.model.check_subset("downstream readStream", self.seen, step)
        out += compare("downstream readStream", Counter(set(self.seen)), Counter(set(latest)), step, kind="downstream")
        return out
