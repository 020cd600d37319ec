"""The features a program can exercise, the pairs of them the runs covered, and the table of that
in ``docs/guarantees.md``.

A feature counts for a program only when the program actually did it (a kill that reached its
boundary, a lost checkpoint a query then ran on, a reader that read): the interpreter records
them as it goes (``ProgramResult.features``). A *pair* is two features of different categories
exercised by one program. Pairs the library refuses by design (a private manifest read by
vanilla Spark, ...) are listed in ``IMPOSSIBLE`` with the reason, not counted as gaps.

    python -m tests.explorer.coverage benchmarks/results/explore-*.jsonl [--docs docs/guarantees.md]
    python -m tests.explorer.coverage --page     # rewrites docs/explorer-coverage.md from PAGE_RESULTS
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

#: category -> features (what the issue's feature list names, as the interpreter records them)
CATALOGUE: dict[str, tuple[str, ...]] = {
    "source": ("source:files", "source:kafka", "source:rate", "source:union", "kafka:grow-partition", "kafka:expire", "kafka:recreate-topic"),
    "query": ("query:filter", "query:projection"),
    "table": (
        "table:parquet",
        "table:json",
        "table:delta",
        "table:iceberg",
        "table:delta+iceberg",
        "table:private-manifest",
        "table:partitioned",
        "table:unpartitioned",
        "staging:rename",
        "staging:direct",
        "table:pre-existing-files",
    ),
    "group": ("group", "group:quarantine", "group:gate"),
    "change": ("change:add-column", "change:widen", "change:refused-batch", "change:option-allowed", "change:option-refused", "query_id"),
    "life": (
        "life:restart",
        "life:new-sink-object",
        "life:same-sink-object",
        "life:foreachBatch",
        "life:lost-checkpoint-earliest",
        "life:lost-checkpoint-table",
        "life:lost-checkpoint-latest",
        "life:replay",
        "life:kill",
        "life:injected-failure",
        "life:zombie",
        "life:idle",
        "life:connect",
    ),
    "maintenance": (
        "maint:recover",
        "maint:gc",
        "maint:verify",
        "maint:compact",
        "maint:audit",
        "maint:in-stream-compaction",
        "downstream:registered",
        "downstream:unregistered",
        "downstream:failed-batch",
        "table:adopted",
    ),
    "reader": ("reader:spark.read", "reader:arrow", "reader:as_of", "reader:delta-rs", "reader:pyiceberg", "reader:readStream"),
}
FEATURES = tuple(f for fs in CATALOGUE.values() for f in fs)
CATEGORY = {f: c for c, fs in CATALOGUE.items() for f in fs}

#: pairs that cannot meet, and why (the library refuses or the reader does not apply)
IMPOSSIBLE: dict[frozenset[str], str] = {}


def _impossible(a: Iterable[str], b: Iterable[str], why: str) -> None:
    for x in a:
        for y in b:
            IMPOSSIBLE[frozenset((x, y))] = why


_FORMATS = ("table:parquet", "table:json", "table:delta", "table:iceberg", "table:delta+iceberg")
_impossible(["table:private-manifest"], ["table:parquet", "table:json"], "spark_manifest=False is for Delta and Iceberg tables")
_impossible(
    ["table:private-manifest"],
    ["reader:spark.read", "reader:readStream", "downstream:registered", "downstream:unregistered", "downstream:failed-batch"],
    "a private manifest is not read by Spark's file source",
)
_impossible(["reader:delta-rs"], ["table:parquet", "table:json", "table:iceberg"], "delta-rs reads Delta tables")
_impossible(["reader:pyiceberg"], ["table:parquet", "table:json", "table:delta"], "pyiceberg reads Iceberg tables")
_impossible(["maint:in-stream-compaction", "downstream:registered"], ["table:json"], "compaction takes Parquet files only")
_impossible(
    ["kafka:grow-partition", "kafka:expire", "kafka:recreate-topic"],
    ["source:files", "source:rate"],
    "a Kafka event in a program without the Kafka-like source",
)
_impossible(
    ["change:widen"],
    # delta-rs, pyiceberg and a private manifest exist only for Delta and Iceberg tables
    ["table:delta", "table:iceberg", "table:delta+iceberg", "reader:delta-rs", "reader:pyiceberg", "table:private-manifest"],
    "add_and_widen is refused for Delta and Iceberg tables",
)
_impossible(
    ["table:adopted"],
    ["group", "group:quarantine", "group:gate"],
    "adopt_existing_files is an ExactlyOnceSink option: DatasetSink refuses it (ConfigError)",
)
_impossible(["table:adopted"], ["table:json"], "adopt_existing_files adopts Parquet files: a JSON table refuses it (ConfigError)")
_impossible(
    ["group", "group:quarantine", "group:gate"],
    ["staging:direct", "table:private-manifest"],
    "dataset groups stage by rename and keep _spark_metadata",
)


def pairs_of(features: Iterable[str]) -> set[frozenset[str]]:
    known = sorted(f for f in set(features) if f in CATEGORY)
    return {frozenset((a, b)) for a, b in itertools.combinations(known, 2) if CATEGORY[a] != CATEGORY[b]}


def all_pairs() -> set[frozenset[str]]:
    return {p for p in pairs_of(FEATURES) if p not in IMPOSSIBLE}


def load(paths: Iterable[Path]) -> list[dict]:
    out = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
    return out


def summarize(results: list[dict]) -> dict:
    features: Counter = Counter()
    pairs: Counter = Counter()
    for r in results:
        fs = set(r.get("features", []))
        features.update(f for f in fs if f in CATEGORY)
        pairs.update("|".join(sorted(p)) for p in pairs_of(fs))
    wanted = all_pairs()
    missing = sorted("|".join(sorted(p)) for p in wanted if "|".join(sorted(p)) not in pairs)
    return {
        "features": dict(features),
        "pairs": dict(pairs),
        "pairs_wanted": len(wanted),
        "pairs_covered": len(wanted) - len(missing),
        "pairs_missing": missing,
    }


def docs_table(summary: dict) -> str:
    """One row per feature: programs that exercised it, and its pairs covered of those possible."""
    wanted = all_pairs()
    covered = set(summary["pairs"])
    lines = ["| feature | programs | pairs covered | not yet covered with |", "|---|---|---|---|"]
    for f in FEATURES:
        mine = [p for p in wanted if f in p]
        have = [p for p in mine if "|".join(sorted(p)) in covered]
        gaps = sorted(next(iter(p - {f})) for p in mine if "|".join(sorted(p)) not in covered)
        gap_text = ", ".join(f"`{g}`" for g in gaps[:6]) + (f" and {len(gaps) - 6} more" if len(gaps) > 6 else "")
        lines.append(f"| `{f}` | {summary['features'].get(f, 0)} | {len(have)} of {len(mine)} | {gap_text or '-'} |")
    return "\n".join(lines)


BEGIN, END = "<!-- explorer-pairs: generated by python -m tests.explorer.coverage -->", "<!-- /explorer-pairs -->"


def write_docs(doc: Path, summary: dict, header: str) -> None:
    text = doc.read_text()
    block = f"{BEGIN}\n{header}\n\n{docs_table(summary)}\n{END}"
    if BEGIN in text:
        start, end = text.index(BEGIN), text.index(END) + len(END)
        text = text[:start] + block + text[end:]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text)


#: the long runs whose results docs/explorer-coverage.md shows (a test renders the page from them)
PAGE_RESULTS = (
    "benchmarks/results/explore-session2.jsonl",
    "benchmarks/results/explore-session3.jsonl",
    "benchmarks/results/explore-session4.jsonl",
    "benchmarks/results/explore-session5.jsonl",
    "benchmarks/results/explore-session6.jsonl",
    "benchmarks/results/explore-session7.jsonl",
    "benchmarks/results/explore-session8.jsonl",
    "benchmarks/results/explore-session9.jsonl",
    "benchmarks/results/explore-session10.jsonl",
    "benchmarks/results/explore-session11.jsonl",
    "benchmarks/results/explore-session12.jsonl",
    "benchmarks/results/explore-session13.jsonl",
    "benchmarks/results/explore-session14.jsonl",
)
PAGE = "docs/explorer-coverage.md"
_PAGE_HEAD = """# Scenario explorer: feature pairs covered

<!-- generated by python -m tests.explorer.coverage --page from {sources}; do not edit -->

The [scenario explorer](design/explorer.md) composes the library's features the way users' jobs
do. A feature counts for a program only when the program did it (a kill that reached its
boundary, a reader that read). This page shows which pairs of features (of different
categories) the long runs exercised together, and how many programs did. Results:
{results}.

{totals}

A cell is the number of programs that exercised both features; **0** is a pair no program
covered yet; `n/a` is a pair that cannot meet (the reason is listed at the end).
"""


def render_page(results: list[dict], sources: Iterable[str]) -> str:
    """docs/explorer-coverage.md: totals, one feature table, then one matrix per pair of
    categories, then the pairs that cannot meet, and why."""
    summary = summarize(results)
    ok = sum(1 for r in results if r.get("ok"))
    inconclusive = sum(1 for r in results if r.get("inconclusive"))
    totals = (
        f"**{len(results)} programs** ({ok} passed, {len(results) - ok - inconclusive} failed, {inconclusive} inconclusive), "
        f"{sum(r.get('steps', 0) for r in results)} steps, {sum(r.get('kills', 0) for r in results)} kills: "
        f"**{summary['pairs_covered']} of {summary['pairs_wanted']} feature pairs covered**."
    )
    results_text = ", ".join(f"`{x}`" for x in sources)
    out = [_PAGE_HEAD.format(sources=", ".join(sources), results=results_text, totals=totals), "## Features\n", docs_table(summary), ""]
    out.append("## Pairs, category by category\n")
    for a, b in itertools.combinations(CATALOGUE, 2):
        out += [f"### {a} x {b}\n", _matrix(summary["pairs"], CATALOGUE[a], CATALOGUE[b]), ""]
    out.append("## Pairs that cannot meet\n")
    reasons: dict[str, list[str]] = {}
    for pair, why in IMPOSSIBLE.items():
        reasons.setdefault(why, []).append(" x ".join(f"`{f}`" for f in sorted(pair)))
    out += [f"* {why}: {', '.join(sorted(pairs))}" for why, pairs in reasons.items()]
    return "\n".join(out) + "\n"


def _matrix(pairs: dict[str, int], rows: tuple[str, ...], columns: tuple[str, ...]) -> str:
    def cell(x: str, y: str) -> str:
        if frozenset((x, y)) in IMPOSSIBLE:
            return "n/a"
        n = pairs.get("|".join(sorted((x, y))), 0)
        return str(n) if n else "**0**"

    lines = ["| | " + " | ".join(f"`{c}`" for c in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| `{r}` | " + " | ".join(cell(r, c) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="*", type=Path, help="the long runs' per-program results (JSON lines)")
    p.add_argument("--docs", type=Path, default=None, help="rewrite the pairs table in this page")
    p.add_argument("--page", action="store_true", help=f"rewrite {PAGE} from {', '.join(PAGE_RESULTS)}")
    args = p.parse_args(argv)
    if args.page:
        repo = Path(__file__).resolve().parents[2]
        (repo / PAGE).write_text(render_page(load(repo / r for r in PAGE_RESULTS), PAGE_RESULTS))
        return 0
    results = load(args.results)
    summary = summarize(results)
    print(f"{len(results)} programs; pairs covered {summary['pairs_covered']} of {summary['pairs_wanted']}")
    for pair in summary["pairs_missing"][:40]:
        print("  not covered:", pair)
    if args.docs:
        header = f"From {len(results)} programs of the long runs: {summary['pairs_covered']} of {summary['pairs_wanted']} feature pairs covered."
        write_docs(args.docs, summary, header)
    return 0


if __name__ == "__main__":
    sys.exit(main())
