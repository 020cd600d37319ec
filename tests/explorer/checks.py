"""After every step: every reader of the table against the model.

* the latest state - ``read.arrow`` against the model (``Model.check``), vanilla ``spark.read``
  equal to it, delta-rs and pyiceberg at their latest version equal to it or one batch behind
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.explorer import readers
from tests.explorer.model import Failure, compare
from tests.explorer.state import DOWNSTREAM_MAX_FILE_AGE

if TYPE_CHECKING:
    from tests.explorer.interpreter import Interpreter


class Checker:
    def __init__(self, it: Interpreter) -> None:
        self.it = it
        #: what each past state read the first time it was checked (it must never change)
        self.as_of: dict[int, frozenset[str]] = {}
        self.delta_seen: dict[int, frozenset[str]] = {}
        self.iceberg_seen: dict[int, frozenset[str]] = {}
        #: rows each table-format reader has shown at its latest version: they must stay
        self.format_ack: dict[str, set[str]] = {"delta": set(), "iceberg": set()}

    @property
    def formats(self) -> set[str]:
        return set(self.it.setup.format.split("+")) if self.it.table.created is None else set(self.it.table.created.format.split("+"))

    def after_step(self, *, full: bool = False, complete: bool | None = None) -> list[Failure]:
        it, table = self.it, self.it.world.table
        step = it.step
        if not readers.has_table(table):
            return self._no_table(step)
        latest = readers.arrow(table)
        it.feature("reader:arrow")
        failures = it.model.check("arrow", latest, step, complete=complete)
        created = it.table.created or it.setup
        if not created.private_manifest:
            fmt = "json" if created.format == "json" else "parquet"
            failures += compare("spark.read", readers.vanilla(it.spark, table, fmt), latest, step)
            it.feature("reader:spark.read")
        failures += self._formats_latest(latest, step)
        failures += self._time_travel(latest, step, full=full)
        if it.downstream is not None and not created.private_manifest:
            failures += it.downstream.catch_up(it, latest, step)
        if not failures:
            it.model.observe(latest)
        return failures

    def _no_table(self, step: int) -> list[Failure]:
        """No table yet: the directory reads as whatever was there before the sink came."""
        it = self.it
        if not it.setup.foreign_files:
            return []
        got = readers.vanilla(it.spark, it.world.table, "parquet")
        foreign = Counter(r.id for r in it.world.records.values() if r.source == "foreign")
        return compare("spark.read (no table yet)", got, foreign, step, kind="lost")

    def _formats_latest(self, latest: Counter, step: int) -> list[Failure]:
        it, table = self.it, self.it.world.table
        out: list[Failure] = []
        views = {}
        if "delta" in self.formats and (table / "_delta_log").is_dir():
            views["delta"] = readers.delta(table)
        if "iceberg" in self.formats and (table / "metadata" / "version-hint.text").exists():
            views["iceberg"] = readers.iceberg(table)
        behind = self._previous_batch(latest)
        for name, got in views.items():
            it.feature("reader:delta-rs" if name == "delta" else "reader:pyiceberg")
            out += it.model.check_subset(name, got, step)
            if got == latest:
                pass
            elif it.model.settled or not (set(behind) <= set(got) <= set(latest)):
                out += compare(name, got, latest, step)
            gone = self.format_ack[name] - set(got)
            if gone:
                out.append(Failure("lost", name, f"rows it showed before are gone: {sorted(gone)[:6]}", step))
            self.format_ack[name] |= set(got)
        return out

    def _previous_batch(self, latest: Counter) -> Counter:
        batches = readers.retained_batches(self.it.world.table)
        return readers.arrow(self.it.world.table, as_of=batches[-2]) if len(batches) > 1 else Counter()

    # -- time travel -----------------------------------------------------------------------------

    def _time_travel(self, latest: Counter, step: int, *, full: bool) -> list[Failure]:
        it, table = self.it, self.it.world.table
        out: list[Failure] = []
        batches = readers.retained_batches(table)
        todo = batches if full else [b for b in batches if b not in self.as_of][-3:]
        if todo:
            it.feature("reader:as_of")
        if it.setup.compaction and batches and batches[-1] + 1 >= it.setup.compact_interval:
            it.feature("maint:in-stream-compaction")
        previous: frozenset[str] | None = None
        for b in batches:
            if b not in todo:
                previous = self.as_of.get(b, previous)
                continue
            got = readers.arrow(table, as_of=b)
            out += it.model.check_subset(f"arrow as_of={b}", got, step)
            ids = frozenset(got)
            if b in self.as_of and self.as_of[b] != ids:
                out.append(Failure("history-changed", f"arrow as_of={b}", _diff(self.as_of[b], ids), step))
            if previous is not None and not previous <= ids:
                out.append(Failure("history-shrank", f"arrow as_of={b}", f"rows of an earlier batch missing: {sorted(previous - ids)[:6]}", step))
            self.as_of.setdefault(b, ids)
            previous = ids
        if batches and frozenset(latest) != self.as_of.get(batches[-1], frozenset(latest)):
            out.append(Failure("as_of-latest", "arrow", _diff(self.as_of[batches[-1]], frozenset(latest)), step))
        if "delta" in self.formats:
            out += self._versions("delta", readers.delta_versions(table), readers.delta, self.delta_seen, full, step)
            out += self._batch_versions("delta", batches, todo, step)
        if "iceberg" in self.formats:
            snaps = readers.iceberg_snapshots(table)
            out += self._versions("iceberg", [s for s, _ in snaps], readers.iceberg, self.iceberg_seen, full, step)
            out += self._batch_versions("iceberg", batches, todo, step)
        return out

    def _versions(self, name: str, versions: list[int], read: Any, seen: dict[int, frozenset[str]], full: bool, step: int) -> list[Failure]:
        """Every version of a table format: each row once, only rows the table may hold, each
        contained in the next, and unchanged since it was first read."""
        it, out = self.it, []
        previous: frozenset[str] | None = None
        for v in versions:
            if not full and v in seen:
                previous = seen[v]
                continue
            got = read(it.world.table, v)
            out += it.model.check_subset(f"{name}@{v}", got, step)
            ids = frozenset(got)
            if v in seen and seen[v] != ids:
                out.append(Failure("history-changed", f"{name}@{v}", _diff(seen[v], ids), step))
            if previous is not None and not previous <= ids:
                out.append(Failure("history-shrank", f"{name}@{v}", f"rows of an earlier version missing: {sorted(previous - ids)[:6]}", step))
            seen.setdefault(v, ids)
            previous = ids
        return out

    def _batch_versions(self, name: str, batches: list[int], todo: list[int], step: int) -> list[Failure]:
        """A batch's own Delta version / Iceberg snapshot reads as ``as_of`` that batch."""
        it, out = self.it, []
        for b in todo:
            try:
                if name == "delta":
                    v = readers.delta_version_of(it.world.table, b)
                    got = readers.delta(it.world.table, v) if v is not None else None
                else:
                    got = readers.iceberg(it.world.table, readers.iceberg_snapshot_of(it.world.table, b))
            except Exception as exc:
                if b == batches[-1] and not it.model.settled:
                    continue  # its table-format step may still be pending after a kill
                out.append(Failure("time-travel", f"{name} of batch {b}", f"{type(exc).__name__}: {exc}"[:400], step))
                continue
            if got is not None and frozenset(got) != self.as_of.get(b):
                out.append(Failure("time-travel", f"{name} of batch {b}", _diff(self.as_of.get(b, frozenset()), frozenset(got)), step))
        return out

    def foreign_files(self) -> None:
        """Before the first action: a Parquet file another tool wrote in the table directory."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        records = self.it.world.add_foreign(5)
        self.it.world.table.mkdir(parents=True, exist_ok=True)
        data = pa.table({"id": [r.id for r in records], "p": [r.p for r in records], "v": pa.array([r.v for r in records], pa.int32())})
        pq.write_table(data, self.it.world.table / "part-00000-foreign.parquet")
        self.it.model.ack |= {r.id for r in records}
        self.it.feature("table:pre-existing-files")


def _diff(want: frozenset[str], got: frozenset[str]) -> str:
    return f"missing {sorted(want - got)[:6]}, extra {sorted(got - want)[:6]}"


class Downstream:
    """A downstream ``spark.readStream`` of the table (file source), run to the end of what the
    table holds after every step on its own checkpoint, collecting every row it reads."""

    def __init__(self, checkpoint: Path) -> None:
        self.checkpoint = checkpoint
        self.seen: Counter = Counter()

    def catch_up(self, it: Interpreter, latest: Counter, step: int) -> list[Failure]:
        if not latest:
            return []
        created = it.table.created or it.setup
        reader = it.spark.readStream.schema("id STRING").option("maxFileAge", DOWNSTREAM_MAX_FILE_AGE)
        reader = reader.format("json" if created.format == "json" else "parquet")
        got: list[str] = []

        def collect(df: Any, _batch: int) -> None:
            got.extend(r.id for r in df.select("id").collect())

        try:
            query = (
                reader.load(str(it.world.table))
                .writeStream.foreachBatch(collect)
                .option("checkpointLocation", str(self.checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(240)
        except Exception as exc:
            text = str(exc).strip().splitlines()
            return [Failure("downstream-error", "readStream", (text[0] if text else type(exc).__name__)[:300], step)]
        if query.isActive:
            query.stop()
            return [Failure("downstream", "readStream", "the downstream query did not finish in time", step)]
        self.seen.update(got)
        it.feature(f"downstream:{it.setup.downstream}", "reader:readStream")
        out = it.model.check_subset("downstream readStream", self.seen, step)
        out += compare("downstream readStream", Counter(set(self.seen)), Counter(set(latest)), step, kind="downstream")
        return out
