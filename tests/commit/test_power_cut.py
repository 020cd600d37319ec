"""EIO at every durable write of the commit path, and a power cut at every commit boundary.

``tests.commit.power_cut_runs`` says what a run does and checks. Every durable write a run
makes - data files, intents, moved names, the WAL claim, manifest and compact files and their
prepared work files, offsets, sources and commit records, verdicts, epochs - is named below,
each with the table kinds that make it; a recording run per kind checks the list is complete.
Each write then fails once with EIO (Linux's semantics: the next fsync of that file succeeds,
its bytes are lost at the power cut), and the power is cut at the end; and, with no EIO, the
power is cut at every commit boundary, in a compaction batch and in a plain one.
"""

from __future__ import annotations

import re

import pytest

from streaming_exactly_once.testing.faults import BOUNDARIES, DELTA_ONLY, GROUP_ONLY
from tests.commit.power_cut_runs import Eio, RunResult, TableKind, boundary_cut, run

KINDS = [
    TableKind("rename"),
    TableKind("direct"),
    TableKind("rename", delta=True),
    TableKind("direct", delta=True, spark_manifest=False),
]
ANY, RENAME, DIRECT = (lambda k: True), (lambda k: k.mode == "rename"), (lambda k: k.mode == "direct")
PRIVATE, SPARK = (lambda k: not k.spark_manifest), (lambda k: k.spark_manifest)
MANIFEST = r"(_spark_metadata|_seo/manifest)"
TMP = r"\.[0-9a-f]{32}\.tmp$"

#: name -> (file or directory, path pattern, the table kinds whose runs make it)
DURABLE_WRITES = {
    "table identity": ("file", r"^_seo/\.table\.", ANY),
    "epoch": ("file", r"^_seo/epochs/\.", ANY),
    "heartbeat": ("file", r"^_seo/heartbeats/\.", ANY),
    "WAL claim": ("file", r"^_seo/wal/\.", ANY),
    "verdict": ("file", r"^_seo/verdicts/\.", ANY),
    "staged data file synced with the claim": ("file", r"^_seo/staging/[^/]+/data/p=a/part-", RENAME),
    "moved data file synced by a roll-forward": ("file", r"^p=a/part-", RENAME),
    "intent": ("file", r"^_seo/staging/[^/]+/intents/\.", DIRECT),
    "data file written in place": ("file", r"^p=a/\.part-", DIRECT),
    "manifest file": ("file", rf"^{MANIFEST}/\.\d+{TMP}", ANY),
    "manifest compact file": ("file", rf"^{MANIFEST}/\.\d+\.compact{TMP}", ANY),
    "manifest compaction work file": ("file", rf"^{MANIFEST}/\.\d+\.compact\.e\d+\.prep$", ANY),
    "manifest file synced by a roll-forward": ("file", rf"^{MANIFEST}/\d+(\.compact)?$", ANY),
    "manifest index": ("file", r"^_seo/manifest-index/\.", ANY),
    **{f"{log} record": ("file", rf"^_seo/{log}/\.\d+{TMP}", ANY) for log in ("commits", "offsets", "sources")},
    **{f"{log} compact file": ("file", rf"^_seo/{log}/\.\d+\.compact{TMP}", ANY) for log in ("commits", "offsets", "sources")},
    **{f"{log} record synced afterwards": ("file", rf"^_seo/{log}/\d+(\.compact)?$", ANY) for log in ("commits", "offsets", "sources")},
    "sources compaction work file": ("file", r"^_seo/sources/\.\d+\.compact\.e\d+\.prep$", ANY),
    "root directory": ("dir", r"^$", ANY),
    "_seo directory": ("dir", r"^_seo$", ANY),
    **{
        f"_seo/{d} directory": ("dir", rf"^_seo/{d}$", ANY)
        for d in ("commits", "epochs", "heartbeats", "manifest-index", "offsets", "sources", "wal", "verdicts")
    },
    "_seo/staging directory": ("dir", r"^_seo/staging$", lambda k: k.delta),  # the Delta helper makes none first
    "an attempt's staging directory": ("dir", r"^_seo/staging/[^/]+$", ANY),
    "staged data directory": ("dir", r"^_seo/staging/[^/]+/data$", RENAME),
    "staged partition directory": ("dir", r"^_seo/staging/[^/]+/data/p=a$", RENAME),
    "intents directory": ("dir", r"^_seo/staging/[^/]+/intents$", DIRECT),
    "_spark_metadata directory": ("dir", r"^_spark_metadata$", SPARK),
    "private manifest directory": ("dir", r"^_seo/manifest$", PRIVATE),
    "partition directory (new names)": ("dir", r"^p=a$", ANY),
}


def writes_of(kind: TableKind) -> list[str]:
    return [name for name, (_, _, applies) in DURABLE_WRITES.items() if applies(kind)]


def boundaries_of(kind: TableKind) -> list[str]:
    skip = set(GROUP_ONLY) | ({"mid-move", "after-move"} if kind.mode == "direct" else {"after-cleanup"})
    if kind.delta:
        skip |= {"after-intent", "before-stage"}  # the Delta helper stages without making the directory first
    else:
        skip |= set(DELTA_ONLY)
    return [b for b in BOUNDARIES if b not in skip]


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> dict[TableKind, RunResult]:
    """One run per table kind without a fault, its fsyncs and boundaries recorded."""
    return {kind: run(tmp_path_factory.mktemp(kind.name), kind, record=True) for kind in KINDS}


def _named(kind: str, path: str) -> list[str]:
    return [name for name, (k, pattern, _) in DURABLE_WRITES.items() if k == kind and re.search(pattern, path)]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_durable_write_of_the_commit_path_is_named(recordings, kind):
    events = recordings[kind].events
    unnamed = sorted({f"{e.kind} {e.path}" for e in events if not _named(e.kind, e.path)})
    assert not unnamed, f"durable writes of a {kind.name} table that no test fails: {unnamed}"
    made = {name for e in events for name in _named(e.kind, e.path)}
    assert made == set(writes_of(kind)), f"named but not made: {set(writes_of(kind)) - made}; made but not listed: {made - set(writes_of(kind))}"


def _eio(recording: RunResult, name: str) -> Eio:
    """The named write's first fsync from batch 1 on (the first at all if batch 0 had the only one)."""
    kind, pattern, _ = DURABLE_WRITES[name]
    matching = [i for i, e in enumerate(recording.events) if e.kind == kind and re.search(pattern, e.path)]
    later = [i for i in matching if i >= recording.batch_starts[1]]
    chosen = later[0] if later else matching[0]
    return Eio(pattern, kind=kind, nth=matching.index(chosen) + 1)


def _say(result: RunResult) -> str:
    return "\n".join(result.problems) + f"\n(power cut: {result.cut})"


@pytest.mark.parametrize("kind,write", [(k, w) for k in KINDS for w in writes_of(k)], ids=lambda x: x.name if isinstance(x, TableKind) else x)
def test_an_eio_at_a_durable_write_then_a_power_cut_loses_no_acknowledged_batch(recordings, tmp_path, kind, write):
    result = run(tmp_path / "t", kind, _eio(recordings[kind], write))
    assert result.injected, f"the EIO at the {write} never happened"
    assert not result.problems, _say(result)


@pytest.mark.parametrize("kind,boundary", [(k, b) for k in KINDS for b in boundaries_of(k)], ids=lambda x: x.name if isinstance(x, TableKind) else x)
@pytest.mark.parametrize("batch", [2, 4], ids=["in-a-compaction-batch", "in-a-plain-batch"])
def test_a_power_cut_at_a_commit_boundary_loses_no_acknowledged_batch(recordings, tmp_path, kind, boundary, batch):
    cut = boundary_cut(recordings[kind].firings, boundary, batch)
    assert cut is not None, f"a {kind.name} run never reaches {boundary} in batch {batch}"
    result = run(tmp_path / "t", kind, cut)
    assert result.injected, f"the run never reached {cut.spec}"
    assert not result.problems, _say(result)
