"""A run of the program's query in the explorer's own process, and what the model expects of it.

``expect`` says which outcomes the docs allow from the current state (a restart with an option
the table fixed at creation is refused; a schema change the table's ``schema_evolution`` does
not allow is refused; a new checkpoint that would start after records the table never got is
refused with ``OffsetGapError``; ...). ``run_query`` runs the query, compares its outcome with
that, checks that a refusal wrote nothing, and then does what the docs tell the user to do about
the refusal (``remedy``), so that the program can go on.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.explorer import readers
from tests.explorer.foreign import adopting_into_json, remedy_existing_files, remedy_json_adoption
from tests.explorer.outcome import Expectation, classify
from tests.explorer.query import RunSpec, build_sink, start_query, stop, stop_when_drained
from tests.explorer.state import FIXED_OPTIONS, MEMBER_OPTIONS, query_columns, sink_options
from tests.explorer.tables import is_poison, tables_of
from tests.explorer.world import TOPICS

if TYPE_CHECKING:
    from tests.explorer.interpreter import Interpreter

RUN_TIMEOUT_S = 240.0
#: every refusal of a batch's schema: the plain one and each table format's own
SCHEMA_REFUSALS = ("SchemaMismatchError", "DeltaSchemaMismatchError", "IcebergSchemaMismatchError")


def spec_of(it: Interpreter, *, max_files: int = 2, drain: bool = False) -> RunSpec:
    q = it.query
    start = q.start if q.fresh else "earliest"
    return RunSpec(
        table=str(it.world.table),
        checkpoint=str(it.checkpoint),
        sources=it.setup.sources,
        input=str(it.world.input),
        kafka=str(it.world.kafka),
        starting=start,
        fail_on_data_loss=q.fail_on_data_loss,
        rate_gen=q.rate_gen,
        filter=it.setup.filter,
        drop_offsets=q.drop_offsets,
        extra_columns=q.extra_columns,
        widen=q.widen,
        max_files=25 if drain else max_files,
        sink=sink_options(it.setup, q, it.downstream.checkpoint if it.downstream else None),
        attach=it.setup.attach,
        group={"partitioned": it.setup.partitioned, "policy": it.setup.policy, "gate": q.gate} if it.setup.group else None,
        connect=it.setup.connect,
    )


def kafka_ends(it: Interpreter) -> dict[str, int]:
    return {f"{t}/{p}": it.world.end_offset(t, p) for t in TOPICS for p in range(it.world.partitions.get(t, 0))}


def kafka_earliest(it: Interpreter) -> dict[str, int]:
    return {f"{t}/{p}": it.world.earliest_offset(t, p) for t in TOPICS for p in range(it.world.partitions.get(t, 0))}


# -- what the docs allow ------------------------------------------------------------------------


def expect(it: Interpreter, spec: RunSpec) -> Expectation:
    e = Expectation()
    created = it.table.created
    if created is not None:
        fixed = [o for o in FIXED_OPTIONS if not (it.setup.group and o == "private_manifest")]  # a group's outputs keep Spark's manifest
        if it.setup.group and not it.table.members:
            fixed = [o for o in fixed if o not in MEMBER_OPTIONS]
        changed = [o for o in fixed if getattr(created, o) != getattr(it.setup, o)]
        if changed:
            e.refuse("ConfigError", *SCHEMA_REFUSALS, reason=f"fixed option changed: {changed}")
            if not it.setup.group:
                return e
            # a group checks a table's options at its first batch, after the offset guard, whose
            # refusals may come first (nothing is written either way)
    if it.setup.foreign_files and it.model.foreign_kept and created is None and not it.query.adopt:
        e.refuse("ExistingFilesError", reason="the table's directory holds another tool's files")
    elif adopting_into_json(it) and created is None:
        e.refuse("ConfigError", reason="adopt_existing_files adopts Parquet files: a JSON table refuses them")
    _expect_schema(it, e)
    if it.restored:
        e.refuse("CheckpointRewoundError", reason="the checkpoint was put back to an older copy", only=False)
    if "kafka" in it.setup.sources:
        _expect_offsets(it, spec, e)
    if it.setup.group and it.setup.policy == "full" and it.query.gate:
        waiting = [
            r
            for r in it.world.records.values()
            if is_poison(r) and it.model.eligible(r) and r.id not in it.model.ack and r.id not in it.model.lost_ok
        ]
        if waiting:
            # a run that starts with a planned batch re-runs only that one (has_pending_batch)
            certain = any(r.source == "files" for r in waiting) and not has_pending_batch(it.checkpoint)
            e.refuse("BatchRejectedError", reason=f"records the gate rejects: {[r.id for r in waiting][:4]}", only=certain)
    return e


def recreated(it: Interpreter, spec: RunSpec) -> None:
    """The first run after a topic was deleted and recreated: the new topic's records that no
    query can tell from the old ones are allowed to be missing (docs/kafka.md, "A topic deleted
    and recreated"): on the same checkpoint, those there before the run (Spark's source goes on
    from the new offsets); from ``latest`` or from ``sink.starting_offsets()`` (the old marks),
    those below where the query starts; from ``earliest`` with a filter, those below the old
    marks (the table holds no row to compare at a filtered offset), and so for a dataset group,
    which compares no records (docs/kafka.md: only the same query's offsets going back)."""
    if not it.recreated or "kafka" not in spec.sources:
        return
    fresh = it.query.fresh
    starting = json.loads(spec.starting) if spec.starting.startswith("{") else {}
    for topic in it.recreated:
        for p in range(it.world.partitions.get(topic, 0)):
            records = it.world.kafka_records(topic, p)
            if not fresh or spec.starting == "latest":
                below = len(records)
            elif starting:
                below = int(starting.get(topic, {}).get(str(p), 0))
            else:
                below = it.marks_before_reset.get(f"{topic}/{p}", 0) if it.setup.filter or it.setup.group else 0
            it.model.lost_ok |= {r.id for r in records if r.offset is not None and r.offset < below} - it.model.ack
    it.recreated.clear()


def _expect_schema(it: Interpreter, e: Expectation) -> None:
    table = it.table
    columns = table.columns
    if columns is None and it.setup.foreign_files and it.query.adopt and it.model.foreign_kept:  # the adopted files' schema
        columns = frozenset({"id", "p", "v"} | ({"topic", "partition", "offset"} if "kafka" in it.setup.sources else set()))
    if columns is None or (it.setup.group and it.setup.policy == "partial"):
        return  # a group under policy="partial" quarantines a table's batch that does not fit
    new = query_columns(it.setup, it.query) - columns
    evolution = it.setup.schema_evolution
    if new and evolution == "none":
        e.refuse(*schema_refusals(it.setup), reason=f"new columns {sorted(new)} without schema_evolution")
    if it.query.widen and not table.widened and evolution != "add_and_widen":
        e.refuse(*schema_refusals(it.setup), reason="v widened to long without add_and_widen")


def schema_refusals(setup: Any) -> tuple[str, ...]:
    """The refusals a batch that does not fit the table's schema may get (docs/schema.md): the
    plain one, or the table format's own - never another format's (a Delta table's error on an
    Iceberg table was a finding)."""
    formats = setup.format.split("+")
    own = "DeltaSchemaMismatchError" if "delta" in formats else "IcebergSchemaMismatchError" if "iceberg" in formats else None
    return ("SchemaMismatchError",) + ((own,) if own else ())


def _expect_offsets(it: Interpreter, spec: RunSpec, e: Expectation) -> None:
    """Gaps (a fresh checkpoint starting after records the table never got) and the stand-in's
    own data-loss error (``failOnDataLoss``)."""
    q, marks = it.query, it.marks
    ends, earliest = kafka_ends(it), kafka_earliest(it)
    if q.fresh and q.start in ("latest", "earliest"):
        start = ends if q.start == "latest" else earliest
        certain = [tp for tp, s in start.items() if marks.lo.get(tp, 0) > 0 and s > marks.hi.get(tp, 0)]
        possible = [tp for tp, s in start.items() if marks.hi.get(tp, 0) > 0 and s > marks.lo.get(tp, 0)]
        if possible and not q.allow_offset_gaps:
            e.refuse("OffsetGapError", reason=f"the new query starts after the table's records in {possible}", only=bool(certain))
        if possible and q.allow_offset_gaps:
            skipped = {r.id for tp in possible for r in _records(it, tp) if r.offset is not None and r.offset < start[tp]}
            it.model.lost_ok |= skipped - it.model.ack
        if q.start == "latest":
            # a partition the table holds no record of for certain (never read, or read only by
            # runs killed before or around their claim): nothing to compare, so the sink cannot
            # tell a gap and the records below the start are skipped as asked (docs/kafka.md)
            unseen = [tp for tp in start if marks.lo.get(tp, 0) == 0]
            it.model.lost_ok |= {r.id for tp in unseen for r in _records(it, tp) if r.offset is not None and r.offset < start[tp]} - it.model.ack
    if q.fresh and it.setup.filter and not q.allow_offset_gaps:
        _expect_filtered_start(it, spec, e)
    unread_expired = [tp for tp, e_ in earliest.items() if e_ > marks.lo.get(tp, 0)]
    if q.fail_on_data_loss and unread_expired:
        e.refuse("DataLoss", reason=f"expired records never read in {unread_expired} (failOnDataLoss)", only=False)
    if it.recreated and not q.fresh and q.fail_on_data_loss:
        # the same checkpoint: Spark's source finds a recreated partition behind (or without) the
        # offsets it had reached - its data-loss error, as Kafka's source reports it
        e.refuse("DataLoss", reason=f"topics {sorted(it.recreated)} recreated under the checkpoint (failOnDataLoss)", only=False)
    if it.recreated and q.fresh and q.start == "earliest" and not q.record_columns:
        e.refuse("OffsetResetError", reason="a recreated topic's records agree with the table's in some columns", only=False)
    if q.drop_offsets and q.fresh and any(marks.hi.get(tp, 0) > 0 for tp in ends):
        # the stand-in records no initial offsets (kafka.md): without the offset columns the sink
        # cannot tell where a new query starts in partitions the table holds, whatever its start
        e.refuse("OffsetColumnsMissingError", reason="a new query without the offset columns", only=False)


def _expect_filtered_start(it: Interpreter, spec: RunSpec, e: Expectation) -> None:
    """The stand-in records no initial offsets, so the sink takes a new query's start in a
    partition from the lowest offset among its first batch's rows (docs/kafka.md): records the
    query's filter drops right after the table's mark look like a gap, and a partition with no row
    left, read beyond the mark, has no known start - either is refused (``OffsetGapError``)."""
    marks, ends = it.marks, kafka_ends(it)
    given = json.loads(spec.starting) if spec.starting.startswith("{") else {}
    begin = {"earliest": kafka_earliest(it), "latest": ends}.get(spec.starting)
    if begin is None:
        begin = {tp: int(given.get(tp.split("/")[0], {}).get(tp.split("/")[1], 0)) for tp in ends}
    looks_late = []
    for tp, start in begin.items():
        rows = [r.offset for r in _records(it, tp) if r.offset is not None and r.offset >= start and it.model.eligible(r)]
        seen = min(rows) if rows else ends[tp]
        lo, hi = marks.lo.get(tp, 0), marks.hi.get(tp, 0)
        if hi == 0 and tp.split("/")[0] in it.recreated:  # the table still holds the deleted topic's mark
            lo = hi = it.marks_before_reset.get(tp, 0)
        if hi > 0 and seen > lo:
            looks_late.append(tp)
    if looks_late:
        e.refuse("OffsetGapError", reason=f"the first rows in {looks_late} start above the table's mark (filtered records)", only=False)


def _records(it: Interpreter, tp: str) -> list[Any]:
    topic, p = tp.split("/")
    return it.world.kafka_records(topic, int(p))


# -- a run ------------------------------------------------------------------------------------


def run_query(it: Interpreter, *, sink: str, max_files: int = 2, fail_at: str | None = None, drain: bool = False) -> str:
    """One run of the query to the end of its input (a rate query: a few batches); returns its
    outcome. Failed checks go to the interpreter's result."""
    spec = spec_of(it, max_files=max_files, drain=drain)
    if spec.starting == "table":
        spec = _resolve_table_start(it, spec)
    expectation = expect(it, spec)
    ends = kafka_ends(it)
    pending = has_pending_batch(it.checkpoint) and not spec.endless
    recreated(it, spec)
    main = tables_of(it)[0].path
    before = readers.arrow(main) if readers.readable(main) and it.table.columns is not None else None
    batches = table_batches(it)
    with it.timed("query"):
        outcome = _run(it, spec, sink, fail_at)
    it.runs += 1
    note_created(it)
    _features(it, spec, sink, outcome, fail_at)
    learn_rate(it, spec)
    allowed = expectation.admits(outcome) or (fail_at is not None and outcome == "InjectedFailure")
    wrote = table_batches(it) != batches
    if not allowed and outcome == "ok" and (spec.attach == "foreachBatch" or it.setup.group) and readers.readable(main) and not wrote:
        # no batch came: foreachBatch(sink) checks the options at a batch, and a DatasetSink its
        # tables' schemas (docs/schema.md, "When the check runs"), and none ran
        allowed = True
    if outcome.startswith("env:"):
        it.feature("env:" + outcome)
    it.say(f"    -> {outcome}" + ("" if expectation.allowed == {"ok"} else f" (allowed {sorted(expectation.allowed)}: {expectation.reasons})"))
    if not allowed:
        kind = "missing-refusal" if outcome == "ok" else "unexpected-refusal"
        detail = f"{outcome}; allowed {sorted(expectation.allowed)} {expectation.reasons}"
        if outcome.startswith("error:"):
            detail += "\n" + it.last_error[-2500:]
        it.fail(kind, "run", detail)
        return outcome
    if outcome == "ok":
        after_success(it, spec, ends, settled=not pending, wrote=wrote)
        it.interrupted = False
    else:
        it.model.settled = False
        it.marks.attempt(ends)
        if outcome not in ("InjectedFailure", "BatchRejectedError") and not outcome.startswith("env:") and before is not None:
            _unchanged_by_refusal(it, outcome, before, readers.arrow(main))
        it.interrupted = it.interrupted or outcome == "InjectedFailure"
        remedy(it, outcome)
    # a run that went through its batches consumed it; one refused for another reason first
    # (a schema, an option) left the checkpoint as it was
    it.restored = it.restored and outcome not in ("ok", "CheckpointRewoundError")
    it.query.fresh = not _has_offsets(it.checkpoint)
    return outcome


def _unchanged_by_refusal(it: Interpreter, outcome: str, before: Any, after: Any) -> None:
    """A refused run wrote nothing. Its writer's open may still complete a batch an earlier run
    decided and did not finish (an injected failure or a kill after the WAL): rows may then be
    added, never taken away."""
    if after == before:
        return
    added_only = not (before - after)
    if added_only and it.interrupted:
        it.say(f"    (the refused run's open completed an earlier interrupted batch: {sorted(set(after) - set(before))[:6]})")
        return
    it.fail("changed-by-refusal", "arrow", f"{outcome} but the table changed: {sorted(set(after) ^ set(before))[:6]}")


def _has_offsets(checkpoint: Path) -> bool:
    offsets = checkpoint / "offsets"
    return offsets.is_dir() and any(p.name.isdigit() for p in offsets.iterdir())


def _resolve_table_start(it: Interpreter, spec: RunSpec) -> RunSpec:
    """``startingOffsets`` from ``sink.starting_offsets()``, as the docs say to restart."""
    if not readers.has_table(Path(spec.table)):
        return replace(spec, starting="earliest")
    try:
        sink = build_sink(spec)
    except Exception:  # a configuration the table refuses: the run says so
        return replace(spec, starting="earliest")
    try:
        offsets = sink.starting_offsets()
    except Exception:
        offsets = None
    finally:
        sink.close()
    return replace(spec, starting=offsets or "earliest")


def _outcome(it: Interpreter, error: BaseException | None) -> str:
    """The outcome of a run; the error's text is kept for the transcript when it is not one the
    explorer knows."""
    outcome = classify(error)
    if outcome.startswith("error:") and error is not None:
        it.last_error = str(error)[:3000]
    return outcome


def _run(it: Interpreter, spec: RunSpec, sink_kind: str, fail_at: str | None) -> str:
    if spec.connect:
        from tests.explorer import lifecycle

        return lifecycle.run_in_driver(it, spec, fail_at)
    if fail_at:
        os.environ["SEO_FAIL_AT"] = fail_at
    try:
        # the same object only while it is the same sink: its options, a group's checks (a lifted
        # gate), and for foreachBatch the checkpoint it was told (a lost checkpoint is a new one)
        built_as = {"sink": spec.sink, "group": spec.group, "checkpoint": spec.checkpoint if spec.attach == "foreachBatch" else None}
        sink = it.sink if sink_kind == "same" and it.sink is not None and it.sink_options == built_as else None
        if sink is None:
            close_sink(it)
            try:
                sink = build_sink(spec)
            except Exception as exc:  # options the sink refuses at once
                return _outcome(it, exc)
        it.sink, it.sink_options = sink, built_as
        try:
            query = start_query(it.spark, sink, spec)
        except Exception as exc:
            return _outcome(it, exc)
        return _await(it, sink, query, spec)
    finally:
        os.environ.pop("SEO_FAIL_AT", None)
        if fail_at:
            _disarm(it.sink)


def _disarm(sink: Any) -> None:
    """The failure a run asked for stays armed in its sink's storage when the run never reached
    it: disarmed, so that a later run of the same sink object runs as a user's sink would."""
    from streaming_exactly_once.testing.faults import FaultInjectingStorage

    storage = getattr(sink, "_storage", None)
    if isinstance(storage, FaultInjectingStorage):
        storage.arm([])


def _await(it: Interpreter, sink: Any, query: Any, spec: RunSpec) -> str:
    try:
        return _await_query(it, sink, query, spec)
    finally:
        _spark_phases(it, query)


def _spark_phases(it: Interpreter, query: Any) -> None:
    """Where the query's own time went, by Spark's ``durationMs`` of each batch (``addBatch`` is
    the sink's write and commit), into the program's phases as ``spark:<name>``."""
    try:
        progress = query.recentProgress
    except Exception:
        return
    for p in progress:
        for name, ms in (p.get("durationMs") or {}).items():
            it.result.phases[f"spark:{name}"] += ms / 1000.0
        it.result.phases["spark:batches"] += 1


def _await_query(it: Interpreter, sink: Any, query: Any, spec: RunSpec) -> str:
    try:
        if spec.endless:
            drained = stop_when_drained(query, spec, RUN_TIMEOUT_S)
            error = query.exception()
            stop(sink, query, spec)
            if not drained:
                return _outcome(it, error) if error is not None else "error:rate query did not drain in time"
        elif not query.awaitTermination(RUN_TIMEOUT_S):
            query.stop()
            return "error:the query did not finish in time"
        return _outcome(it, query.exception())
    except Exception as exc:
        return _outcome(it, exc)


def close_sink(it: Interpreter) -> None:
    if it.sink is not None:
        try:
            it.sink.close()
        except Exception:
            pass
        it.sink = None


def has_pending_batch(checkpoint: Path) -> bool:
    """Spark planned a batch it has not committed: an ``availableNow`` run re-runs only that batch
    and stops (what arrived since waits for the next run). Not so an endless (rate) query: it
    re-runs that batch and goes on until it read everything (``stop_when_drained``) - and a
    stopped one often leaves such a batch, so it would never count as settled."""
    offsets, commits = checkpoint / "offsets", checkpoint / "commits"
    planned = [int(p.name) for p in offsets.iterdir() if p.name.isdigit()] if offsets.is_dir() else []
    done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    return bool(planned) and max(planned) > max(done, default=-1)


def table_batches(it: Interpreter) -> list[int]:
    """The batches the program's (first) table holds now: a run that changed them wrote one."""
    main = tables_of(it)[0].path
    return readers.retained_batches(main) if readers.readable(main) else []


def note_created(it: Interpreter) -> None:
    """A run - ok, refused, killed - that left the table's identity fixed its options: the ones
    of the setup it ran with (a kill after the claim, or a refusal after the open, leaves one)."""
    if it.table.created is None and readers.has_table(it.world.table):
        it.table.created = it.setup
    if it.setup.group and it.table.created is not None and not it.table.members and _group_members(it.world.table):
        it.table.created = replace(it.table.created, **{o: getattr(it.setup, o) for o in MEMBER_OPTIONS})
        it.table.members = True


def _group_members(root: Path) -> bool:
    """A dataset group's member tables exist (identity files below its root's)."""
    return any(p != root / "_seo" / "table" for p in root.glob("**/_seo/table"))


def after_success(it: Interpreter, spec: RunSpec, ends: dict[str, int], *, settled: bool = True, wrote: bool = True) -> None:
    """A run that ended without error read everything its sources held when it started - unless
    it started with a batch Spark had planned and not committed (``has_pending_batch``). The
    query's columns are the table's only once a batch of the run (``wrote``) brought them: a run
    that found nothing new checked no schema, and the table keeps its columns."""
    note_created(it)
    if wrote:  # its (first) table has a batch of this run - a group's tables too
        cols = query_columns(it.setup, it.query)
        it.table.columns = cols if it.table.columns is None else it.table.columns | cols
        it.table.widened = it.table.widened or it.query.widen
    if settled:
        it.model.settled = True
        it.marks.settle(ends)
    else:
        it.marks.attempt(ends)


def remedy(it: Interpreter, outcome: str) -> None:
    """What the docs tell the user to do about a refusal, applied before the next run."""
    q = it.query
    if outcome == "ConfigError" and adopting_into_json(it) and it.table.created is None:
        remedy_json_adoption(it)  # as the refusal says: the other tool's files move out of the directory
    elif outcome in ("ConfigError", *SCHEMA_REFUSALS) and it.table.created is not None:
        fixed = {o: getattr(it.table.created, o) for o in ("format", "partitioned", "compact_interval", "private_manifest")}
        it.setup = replace(it.setup, **fixed)
        it.query = replace(q, extra_columns=_table_extra(it), widen=it.table.widened)
    elif outcome in SCHEMA_REFUSALS and it.setup.foreign_files and q.adopt:
        it.query = replace(q, extra_columns=0, widen=False)  # the query fits the adopted files' schema again
    elif outcome == "OffsetGapError":
        if q.start == "latest":  # restart from where the table's records end
            it.new_checkpoint("table")
        else:  # records expired before any query read them: skip them on purpose
            it.query = replace(q, allow_offset_gaps=True)
    elif outcome == "OffsetColumnsMissingError":  # keep the source's offset columns in the batch
        it.query = replace(q, drop_offsets=False)
    elif outcome == "ExistingFilesError":  # the user asks the sink to adopt the files (a group: moves them out)
        remedy_existing_files(it)
    elif outcome == "OffsetResetError":  # name the columns that make a record (docs/kafka.md)
        it.query = replace(q, record_columns=True)
    elif outcome == "CheckpointRewoundError":  # as the error says: a new checkpoint, from the table's offsets
        it.new_checkpoint("table" if "kafka" in it.setup.sources else "earliest")
    elif outcome == "DataLoss":
        it.query = replace(q, fail_on_data_loss=False)
    elif outcome == "BatchRejectedError":  # the user lifts the check that rejected the batch
        it.query = replace(q, gate=False)
    it.say(f"    remedy for {outcome}: start={it.query.start} allow_gaps={it.query.allow_offset_gaps}")


def _table_extra(it: Interpreter) -> int:
    cols = it.table.columns or frozenset()
    return sum(1 for c in cols if c.startswith("c") and c[1:].isdigit())


def learn_rate(it: Interpreter, spec: RunSpec) -> None:
    """The rate source's records of this run, from the checkpoint: made (offsets logged) and
    committed (Spark's commit log)."""
    if "rate" not in spec.sources:
        return
    index = spec.sources.index("rate")
    offsets, commits = Path(spec.checkpoint) / "offsets", Path(spec.checkpoint) / "commits"
    if not offsets.is_dir():
        return
    ends = {}
    for f in offsets.iterdir():
        if f.name.isdigit():
            lines = f.read_text().splitlines()
            if len(lines) > 2 + index and lines[2 + index].startswith("{"):
                ends[int(f.name)] = json.loads(lines[2 + index])["offset"]
    if not ends:
        return
    it.world.add_rate(spec.rate_gen, range(max(ends.values())))
    committed = [b for b in ends if (commits / str(b)).exists()]
    if committed:
        it.model.rate_committed |= {f"r{spec.rate_gen}-{v}" for v in range(ends[max(committed)])}


def _features(it: Interpreter, spec: RunSpec, sink: str, outcome: str, fail_at: str | None) -> None:
    s, q = it.setup, it.query
    it.feature(*(f"source:{x}" for x in spec.sources))
    if len(spec.sources) > 1:
        it.feature("source:union")
    it.feature(f"table:{s.format}", f"staging:{s.staging}", "table:partitioned" if s.partitioned else "table:unpartitioned")
    flags = {
        "table:private-manifest": s.private_manifest,
        "query:filter": s.filter,
        "query:projection": q.drop_offsets or q.extra_columns > 0 or q.widen,
        "query_id": s.query_id,
        "life:foreachBatch": s.attach == "foreachBatch",
        "life:injected-failure": fail_at is not None,
        "life:restart": it.runs > 1,
        "life:same-sink-object": it.runs > 1 and sink == "same" and it.sink is not None,
        "life:new-sink-object": it.runs > 1 and sink != "same",
        "group": s.group,
        "life:connect": s.connect,
    }
    it.feature(*(name for name, on in flags.items() if on))
    if outcome == "ok":
        if q.adopt and s.foreign_files:
            it.feature("table:adopted")
        if q.extra_columns:
            it.feature("change:add-column")
        if q.widen:
            it.feature("change:widen")
    elif outcome in SCHEMA_REFUSALS and it.table.created is not None:
        it.feature("change:refused-batch")
    if it.pending_change is not None:
        it.feature("change:option-allowed" if outcome == "ok" else "change:option-refused")
        it.pending_change = None
    if outcome == "BatchRejectedError":  # the gate rejected the batch (policy="full")
        it.feature("group:gate")
    if outcome not in ("ok", "InjectedFailure"):
        it.feature(f"refused:{outcome}")
