"""The features a program can exercise, the pairs of them the runs covered, and the table of that
in ``docs/guarantees.md``.

A feature counts for a program only when the program actually did it (a kill that reached its
boundary, a lost checkpoint a query then ran on, a reader that read): the interpreter records
them as it goes (``ProgramResult.features``). A *pair* is two features of different categories
exercised by one program. Pairs the library refuses by design (a private manifest read by
vanilla Spark, ...) are listed in ``IMPOSSIBLE`` with the reason, not counted as gaps.

    python -m tests.explorer.coverage benchmarks/results/explore-*.jsonl [--docs docs/guarantees.md]
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
        "maint:in-stream-compaction",
        "downstream:registered",
        "downstream:unregistered",
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
    ["reader:spark.read", "reader:readStream", "downstream:registered", "downstream:unregistered"],
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
_impossible(["change:widen"], ["table:delta", "table:iceberg", "table:delta+iceberg"], "add_and_widen is refused for Delta and Iceberg tables")
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", type=Path, help="the long runs' per-program results (JSON lines)")
    p.add_argument("--docs", type=Path, default=None, help="rewrite the pairs table in this page")
    args = p.parse_args(argv)
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
