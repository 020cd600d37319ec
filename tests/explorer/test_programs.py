"""The explorer's own parts that need no Spark: programs from seeds, their JSON, the shrinker, the
coverage of feature pairs, the outcome of an error."""

from __future__ import annotations

from pathlib import Path

from tests.explorer import coverage, regressions
from tests.explorer.generate import EVERYTHING, SLICE, generate
from tests.explorer.model import Failure
from tests.explorer.outcome import Expectation, classify
from tests.explorer.program import Action, Program, Setup
from tests.explorer.shrink import normalized, shrink


def test_a_seed_always_gives_the_same_program():
    assert generate(41) == generate(41)
    assert generate(41) != generate(42)
    assert generate(41, SLICE).setup.format in SLICE.formats


def test_programs_round_trip_through_their_json():
    for seed in range(30):
        program = generate(seed, EVERYTHING)
        assert Program.from_json(program.to_json()) == program


def test_a_saved_regression_reads_back_as_the_same_program(tmp_path: Path):
    program = generate(7)
    regressions.save(tmp_path / "r.json", program, finding="X9", title="t", failure="lost:arrow")
    data, back = regressions.load(tmp_path / "r.json")
    assert back == program and data["finding"] == "X9" and data["listing"][0].startswith("program seed=7")


def test_every_saved_regression_is_a_valid_program():
    for path in regressions.saved():
        data, program = regressions.load(path)
        assert program.actions and data["finding"] and "open" in data, path


def test_the_listing_names_every_action():
    program = Program(3, Setup(), (Action.of("produce", files=1), Action.of("kill", boundary="after-wal")))
    assert program.listing().splitlines()[1:] == ["   1. produce files=1", "   2. kill boundary=after-wal"]


def test_the_shrinker_keeps_only_what_the_failure_needs():
    """A failure that needs a kill after a produce, in a partitioned table: the rest goes."""
    actions = [Action.of("produce", files=i) for i in range(6)] + [Action.of("kill", boundary="x")] + [Action.of("run")] * 4
    program = Program(1, Setup(partitioned=True, filter=True, compaction=True), tuple(actions))

    def run(candidate: Program) -> str | None:
        kinds = [a.kind for a in candidate.actions]
        needs = "produce" in kinds and "kill" in kinds and kinds.index("produce") < kinds.index("kill") and candidate.setup.partitioned
        return "lost:arrow as_of=3" if needs else None

    small = shrink(program, "lost:arrow as_of=7", run, log=lambda _t: None)
    assert [a.kind for a in small.actions] == ["produce", "kill"]
    assert small.setup.partitioned and not small.setup.filter and not small.setup.compaction


def test_signatures_ignore_batch_numbers():
    assert normalized("history-changed:arrow as_of=12") == normalized("history-changed:arrow as_of=3")
    assert normalized("lost:arrow") != normalized("lost:spark.read")


def test_outcomes_name_the_library_error_that_refused():
    assert classify(None) == "ok"
    assert classify("StreamingQueryException: ... streaming_exactly_once.errors.OffsetGapError: batch 3 ...") == "OffsetGapError"
    assert (
        classify(RuntimeError("offsets 0..3 of t/0 are gone: expired, or the topic was deleted or recreated (retained: 2..3; failOnDataLoss=true)"))
        == "DataLoss"
    )
    assert classify("java.lang.OutOfMemoryError\nmore").startswith("error:")
    e = Expectation()
    e.refuse("ConfigError", reason="format changed")
    assert e.must_refuse and e.admits("ConfigError") and not e.admits("ok")


def test_pairs_are_counted_across_categories_only():
    pairs = coverage.pairs_of({"source:files", "source:kafka", "table:delta", "life:kill"})
    assert frozenset({"source:files", "source:kafka"}) not in pairs
    assert frozenset({"source:files", "table:delta"}) in pairs and len(pairs) == 5
    summary = coverage.summarize([{"features": ["source:files", "table:delta"]}])
    assert summary["pairs"] == {"source:files|table:delta": 1}
    assert "source:files|table:delta" not in summary["pairs_missing"]
    assert all(p not in coverage.all_pairs() for p in coverage.IMPOSSIBLE)


def test_a_failure_describes_its_step_and_reader():
    f = Failure("duplicate", "spark.read", "2 ids read more than once: f1-0, f1-1", step=4)
    assert f.signature == "duplicate:spark.read" and f.describe().startswith("step 4: duplicate (spark.read)")


def test_the_coverage_page_is_what_its_generator_writes_from_the_long_runs_results():
    """docs/explorer-coverage.md is rendered from the committed results of the long runs
    (``python -m tests.explorer.coverage --page``): an edit by hand, or new results without the
    page regenerated, fails here."""
    repo = Path(__file__).resolve().parents[2]
    results = coverage.load(repo / r for r in coverage.PAGE_RESULTS)
    assert results, "the long run's results are committed"
    assert (repo / coverage.PAGE).read_text() == coverage.render_page(results, coverage.PAGE_RESULTS)


def test_the_coverage_matrix_marks_uncovered_and_impossible_pairs():
    page = coverage.render_page([{"features": ["source:files", "table:delta"], "ok": True, "steps": 3, "kills": 0}], ["x.jsonl"])
    assert "**1 programs** (1 passed, 0 failed, 0 inconclusive), 3 steps, 0 kills" in page
    row = next(line for line in page.splitlines() if line.startswith("| `source:files` |") and "n/a" not in line and line.count("|") > 8)
    assert " 1 |" in row and "**0**" in row
    assert "n/a" in page and "delta-rs reads Delta tables" in page


def test_a_guided_run_picks_seeds_no_earlier_long_run_ran():
    """``--guided`` counts the pairs and seeds of the long runs on the coverage page as covered
    and done, so a new session's programs are new ones."""
    from tests.explorer.run import RESULTS, earlier_results, guided_seeds

    earlier = earlier_results(RESULTS / "explore-no-such-run.jsonl")
    done = {r["seed"] for r in earlier}
    assert done, "the coverage page's long runs are committed"
    seeds = guided_seeds(min(done), 4, earlier, "everything")
    assert len(seeds) == 4 and not set(seeds) & done


def test_an_injected_failure_a_library_error_carries_is_the_injected_failure():
    from tests.explorer.outcome import classify

    text = "IcebergTableError: Iceberg commit of manifest batch 16 to t failed: InjectedFailure: injected failure at mid-iceberg (occurrence 1)."
    assert classify(text) == "InjectedFailure"
    assert classify("IcebergTableError: Iceberg commit of manifest batch 16 to t failed: OSError") == "IcebergTableError"
