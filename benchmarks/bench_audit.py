"""``seo audit`` at scale: one new batch after 100, 1,000 and 10,000 (and 100,000) batches, a full
audit of 10,000, and the ledger's cost per batch in the commit.

The table grows through the real commit path (``TableCommitter``, rename mode, one Parquet file
of 8 rows per batch, manifest compact interval 10, no data compaction: every file stays live),
as ``bench_compaction_scale`` does. At each mark N the batches so far are audited (the mark
``_seo/audit`` saved), batch N is committed, and the audit of that one new batch is timed
(``record=False``, so each repetition does the same work; median of ``REPEATS``). Then the audit
of the ten batches up to the next compact file (a *whole* run: it also reads the live listing,
runs the live-twice check and lists the data directories, once per compact interval), and at
the end one full audit from batch 0 (``--from 0``). The ledger's cost per batch is the commit's
``stepMs.ledgerBuild`` (its one read of the file, the CRC-32, the footer parse).

100,000 batches through the commit path take far longer than the rest, so that mark is
synthetic: the 10,000-batch table is extended to 100,000 by writing each further batch's data
file, manifest file (a compact file every 10 batches holding only its own batch's entry, not
every live file: a reader could not use it; the one-new-batch audit reads no compact file),
ledger and commit-free mark directly - what grows (the directories ``_spark_metadata`` and
``_seo/ledger`` with one file per batch) is real, the manifest's live listing is not.

    python -m benchmarks.bench_audit [--synthetic 100000] [--out benchmarks/results/audit.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .stats import summary

QUERY = "a0d17a0d-1700-0000-0000-000000000000"
ROWS = 8
MARKS = (100, 1_000, 10_000)
REPEATS = 7


def _parquet(ids: list[int]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), buf)
    return buf.getvalue()


def _committer(root: Path) -> Any:
    from streaming_exactly_once.commit.committer import CommitterOptions, TableCommitter
    from streaming_exactly_once.storage import open_storage

    return TableCommitter(open_storage(str(root)), CommitterOptions(compact_interval=10))


def _batch(committer: Any, b: int) -> float:
    """Commit batch ``b`` (one file); the ledger's build time in ms."""
    from streaming_exactly_once.checkpoint.reader import InputFile
    from streaming_exactly_once.commit.protocol.attempt import StagedFile

    storage = committer.storage
    with committer.batch(QUERY, b, mode="rename") as attempt:
        final = f"part-00000-{attempt.attempt}.c000.snappy.parquet"
        staged = f"{attempt.staging_dir}/data/{final}"
        storage.put_if_absent(staged, _parquet(list(range(b * ROWS, (b + 1) * ROWS))))
        info = storage.info(staged)
        files = [StagedFile(final=final, size=info.size, mtime_ms=info.mtime_ms, staged=staged)]
        result = committer.commit(attempt, files, input_files=[InputFile(source=0, path=f"file:///in/{b}.csv", timestamp=1)], num_rows=ROWS)
    return float(result.timings.get("ledgerBuild", float("nan")))


def _audit(storage: Any, *, repeats: int = 1, **kwargs: Any) -> dict[str, Any]:
    """``audit_table`` timed ``repeats`` times: ms (summary), its storage calls, what it checked."""
    from streaming_exactly_once.maintenance.audit import audit_table

    times, report = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        report = audit_table(storage, **kwargs)
        times.append((time.perf_counter() - t0) * 1000)
    assert report is not None and report.passed, report.to_json() if report else None
    doc = report.to_json()
    return {"ms": summary(times), "reads": doc["reads"], "from": doc["auditedFrom"], "to": doc["auditedTo"]}


def grow(root: Path, marks: tuple[int, ...] = MARKS) -> dict[str, Any]:
    from streaming_exactly_once.storage import open_storage

    c = _committer(root)
    storage = open_storage(str(root))
    ledger_ms: list[float] = []
    out: dict[str, Any] = {"marks": {}}
    b, t_start = 0, time.perf_counter()
    for mark in marks:
        c.ensure_open()
        while b < mark:
            ledger_ms.append(_batch(c, b))
            b += 1
        c.janitor.drain()
        catch_up = _audit(storage)  # batches since the previous mark, recorded
        ledger_ms.append(_batch(c, b))
        b += 1
        c.janitor.drain()
        one = _audit(storage, repeats=REPEATS, record=False)
        _audit(storage)  # the new batch recorded
        c.ensure_open()
        while (b + 1) % 10:  # up to the next compact file
            ledger_ms.append(_batch(c, b))
            b += 1
        ledger_ms.append(_batch(c, b))
        b += 1
        c.janitor.drain()
        whole = _audit(storage, repeats=REPEATS, record=False)
        _audit(storage)
        out["marks"][str(mark)] = {"catch_up": catch_up, "one_new_batch": one, "whole_run": whole}
        print(
            f"  {mark:>7,} batches: one new batch {one['ms']['median']:.2f} ms ({one['reads']} calls), "
            f"a whole run over {whole['to'] - whole['from'] + 1} batches {whole['ms']['median']:.1f} ms",
            flush=True,
        )
    c.close()
    out["build_s"] = round(time.perf_counter() - t_start, 1)
    full = _audit(storage, from_batch=0, record=False)
    out["full"] = {**full, "batches": b}
    print(f"  full audit of {b:,} batches: {full['ms']['median'] / 1000:.2f} s", flush=True)
    out["ledger_build_ms"] = summary([m for m in ledger_ms if m == m])
    print(f"  ledger build per batch: median {out['ledger_build_ms']['median']:.3f} ms, p99 {out['ledger_build_ms']['p99']:.3f} ms", flush=True)
    out["batches"] = b
    return out


def synthetic(root: Path, upto: int) -> dict[str, Any]:
    """Extend the table at ``root`` to ``upto`` batches by writing files directly (module
    docstring), then time the audit of one new batch after a mark at ``upto - 1``."""
    from dataclasses import replace

    from streaming_exactly_once.commit.table_steps.ledger_step import checksum_of
    from streaming_exactly_once.manifest.entry import ManifestEntry
    from streaming_exactly_once.manifest.manifest_log import ManifestLog
    from streaming_exactly_once.storage import open_storage
    from streaming_exactly_once.table.audit_mark import read_mark, write_mark
    from streaming_exactly_once.table.ledger import LedgerFile, read_ledger, write_ledger

    storage = open_storage(str(root))
    manifest = ManifestLog(storage)
    manifest.know_interval(10)
    first = manifest.latest_batch_id(refresh=True)
    assert first is not None
    template = read_ledger(storage, first)
    assert template is not None
    data = _parquet(list(range(ROWS)))
    fast = storage.without_sync()
    t0 = time.perf_counter()
    for b in range(first + 1, upto + 1):
        path = f"part-00000-synthetic-{b:08d}.c000.snappy.parquet"
        fast.put_if_absent(path, data)
        entry = ManifestEntry.for_file(storage.uri(path), size=len(data), modification_time=1)
        fast.put_if_absent(manifest.path(b), manifest.encode([entry]))
        own = LedgerFile(path, len(data), ROWS, checksum_of(data), len(data))
        write_ledger(storage, replace(template, batch_id=b, spark_batch_id=b, files=(own,), published={"manifest": b}), durable=False)
        if b == upto - 1:
            mark = read_mark(storage)
            assert mark is not None and mark.manifest is not None
            info = storage.info(manifest.path(b))
            seen = replace(mark.manifest, compact=b, compact_size=info.size, compact_mtime_ms=info.mtime_ms)
            write_mark(storage, replace(mark, audited_to=b, latest_batch_id=b, manifest=seen))
    built = time.perf_counter() - t0
    one = _audit(storage, repeats=REPEATS, record=False)
    print(f"  {upto:>7,} batches (synthetic, built in {built:.0f} s): one new batch {one['ms']['median']:.2f} ms ({one['reads']} calls)", flush=True)
    return {"batches": upto, "build_s": round(built, 1), "one_new_batch": one}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--synthetic", type=int, default=100_000, help="extend to this many batches (0: no synthetic mark)")
    p.add_argument("--out", default="benchmarks/results/audit.json")
    p.add_argument("--work", default=None)
    p.add_argument("--marks", default=",".join(str(m) for m in MARKS), help="batches before each one-new-batch audit")
    args = p.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="seo-audit-bench-"))
    root = work / "t"
    shutil.rmtree(root, ignore_errors=True)
    results: dict[str, Any] = {"rows_per_batch": ROWS, "files_per_batch": 1, "compact_interval": 10, "repeats": REPEATS}
    results.update(grow(root, tuple(int(m) for m in args.marks.split(","))))
    if args.synthetic and args.synthetic > results["batches"]:
        results["synthetic"] = synthetic(root, args.synthetic)
    results["command"] = "python -m benchmarks.bench_audit " + " ".join(argv if argv is not None else sys.argv[1:])
    results["date"] = time.strftime("%Y-%m-%d")
    results["load"], results["cpus"] = os.getloadavg()[1], os.cpu_count()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()


def report_lines(a: dict[str, Any]) -> list[str]:
    """The ``docs/benchmarks.md`` section (``benchmarks.report``)."""
    md = [
        "## seo audit: one new batch as the history grows",
        "",
        f"One Parquet file of {a['rows_per_batch']} rows per batch through the commit path (rename mode, manifest compact "
        f"interval {a['compact_interval']}, no data compaction: every file stays live); medians of {a['repeats']} runs of "
        f"`audit_table(record=False)` (`seo audit --no-record`). Made by `{a['command']}` on {a['date']}"
        + (
            f", machine load average {a['load']:.0f} on {a.get('cpus', '?')} CPUs (so timings are noisy; the calls are exact)."
            if a.get("load")
            else "."
        ),
        "",
        "| batches before | one new batch (ms) | p95 (ms) | storage calls | whole run: the batches up to the next compact file (ms) | its batches |",
        "|---|---|---|---|---|---|",
    ]
    for mark, m in a["marks"].items():
        one, whole = m["one_new_batch"], m["whole_run"]
        md.append(
            f"| {int(mark):,} | {one['ms']['median']:.2f} | {one['ms']['p95']:.2f} | {one['reads']} | "
            f"{whole['ms']['median']:.1f} | {whole['to'] - whole['from'] + 1} |"
        )
    s = a.get("synthetic")
    if s:
        one = s["one_new_batch"]
        md.append(f"| {s['batches']:,} (synthetic) | {one['ms']['median']:.2f} | {one['ms']['p95']:.2f} | {one['reads']} | - | - |")
    full, ledger = a["full"], a["ledger_build_ms"]
    md += [
        "",
        f"A full audit (`--from 0`) of {full['batches']:,} batches: {full['ms']['median'] / 1000:.1f} s "
        f"({full['reads']:,} storage calls). The ledger's cost in the commit (`stepMs.ledgerBuild`: one read of the file, "
        f"its CRC-32, the footer parse): median {ledger['median']:.3f} ms, p99 {ledger['p99']:.3f} ms per batch over "
        f"{ledger['n']:,} batches; nothing durable is written for it beyond the WAL claim.",
        "",
        "The one-new-batch run reads the mark, probes the manifest from it (no listing), stats the manifest batch files "
        "after the newest compact file (fewer than the compact interval: an audited one that changed is checked again), and "
        "reads the new batch's ledger, manifest file and data file: the same calls at every size. A whole run - once per compact interval, "
        "when the manifest's newest compact file changed - also reads the live listing and the one before the "
        "compact file (to check the compact file against it) and lists the data directories, so it grows with the live "
        "files (here one per batch); data compaction bounds them.",
        "",
    ]
    if s:
        md += [
            f"The {s['batches']:,}-batch row extends the {a['batches']:,}-batch table by writing each further batch's files directly "
            "(`benchmarks/bench_audit.py` says how): the directories hold one file per batch as a real table's do, "
            "but its compact files do not list every live file, so only the one-new-batch run is measured there.",
            "",
        ]
    return md
