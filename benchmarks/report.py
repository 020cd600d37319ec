"""Turn ``results.json`` into ``docs/benchmarks.md`` (tables) and ``docs/img/*.png`` (plots)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .bench_delta import growth_section as delta_growth_section, section as delta_section
from .bench_targets import section as targets_section
from .bench_tiny_cost import section as tiny_cost_section
from .growth_charts import iceberg_step_section, throughput_chart
from .memory_probe import section as memory_section

DOCS = Path("docs")
IMG = DOCS / "img"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _pyplot():
    """matplotlib's pyplot without a display, or None if matplotlib is missing (tables only)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(plt, fig, ax, name: str) -> str:
    """Finish a plot and write ``docs/img/<name>.png``; the path for the Markdown."""
    ax.legend()
    ax.grid(alpha=0.3)
    IMG.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(IMG / f"{name}.png", dpi=110)
    plt.close(fig)
    return f"img/{name}.png"


def _plot_tiny(tiny: dict[str, Any]) -> str | None:
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, series in tiny["series"].items():
        values = series["addBatch_ms"]
        if not values:
            continue
        window = max(1, len(values) // 60)
        xs = list(range(0, len(values), window))
        ys = [sorted(values[i : i + window])[len(values[i : i + window]) // 2] for i in xs]
        ax.plot(xs, ys, label=name.replace("_", " "))
    ax.set_xlabel("batch id")
    ax.set_ylabel("addBatch, ms (median per window)")
    ax.set_title(f"Tiny batches: per-batch time as history grows ({tiny['batches']} batches)")
    return _save(plt, fig, ax, "tiny_batches")


def _plot_history(history: dict[str, Any]) -> str | None:
    plt = _pyplot()
    if plt is None:
        return None
    windows = history["windows"]
    fig, ax = plt.subplots(figsize=(8, 4))
    xs = [w["to"] for w in windows]
    ax.plot(xs, [w["median"] for w in windows], label="median")
    ax.plot(xs, [w["p99"] for w in windows], label="p99")
    ax.plot(xs, [w["max"] for w in windows], label="max (compaction batches)", alpha=0.6)
    ax.set_yscale("log")
    ax.set_xlabel("batch id")
    ax.set_ylabel("commit latency, ms")
    ax.set_title(f"Commit path vs history: {history['live_files']:,} live files after {history['batches']:,} batches")
    return _save(plt, fig, ax, "history")


def _plot_readers(readers: dict[str, Any]) -> str | None:
    plt = _pyplot()
    if plt is None:
        return None
    ns = sorted(int(n) for n in readers)
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (
        ("ours_files_index_s", "read.files (index)"),
        ("ours_files_json_s", "read.files (JSON)"),
        ("spark_planning_s", "Spark planning"),
    ):
        ax.plot(ns, [readers[str(n)][key]["median"] for n in ns], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("manifest entries")
    ax.set_ylabel("seconds")
    ax.set_title("Committed file list")
    return _save(plt, fig, ax, "readers")


def throughput_table(t: dict[str, Any]) -> list[str]:
    lines = [
        "| writer | median run (s) | p95 (s) | vs plain append | paired ratios, round by round | median addBatch (ms) "
        "| addBatch - plain (ms) | addBatch vs plain | median foreachBatch call (ms) | call vs plain |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    plain_add = t["writers"].get("plain_foreachBatch", {}).get("addBatch_ms", {}).get("median")
    for name, w in t["writers"].items():
        paired = ", ".join(f"{x:.3f}" for x in w.get("paired_ratios", []))
        extra = w.get("addBatch_minus_plain_ms")
        add = w["addBatch_ms"]["median"]
        call = w.get("call_ms", {}).get("median")
        call_ratio = w.get("call_vs_plain")
        lines.append(
            f"| {name.replace('_', ' ')} | {w['wall_s']['median']:.2f} | {w['wall_s']['p95']:.2f} | "
            f"{w['ratio_vs_plain']:.3f}x (paired {w.get('paired_ratio_median', float('nan')):.3f}x) | {paired} | "
            f"{_ms(add)} | {'' if extra is None else f'{extra:+.1f}'} | {f'{add / plain_add:.3f}x' if plain_add else ''} | "
            f"{'-' if call is None else f'{call:.1f}'} | {'-' if call_ratio is None else f'{call_ratio:.3f}x'} |"
        )
    lines += [
        "",
        "Each run starts after `os.sync()`, outside its timing: Spark's writers do not sync their files, so "
        "without it the kernel writes one run's files back during the next run, and that run pays for them (this "
        "sink syncs its own files within its run). The paired ratios show how much runs still vary. The per-batch "
        "cost is steadier: `addBatch vs plain` is the median time Spark spent in one batch's write, this "
        "writer's against plain `foreachBatch`'s, over every batch of every round. `foreachBatch call` is the "
        "time inside the function Spark calls: what a sink controls (Spark's own sink has none).",
    ]
    phased = [(n, w["phases_ms"]) for n, w in t["writers"].items() if w.get("phases_ms")]
    if phased:
        lines += [
            "",
            "Where a batch of this sink spends its time (medians, ms): `prepare` is the driver's work before Spark's "
            "write (query identity, lease, reading the checkpoint's offsets and input files), `stage` is Spark's "
            "write with the batch's observed row count, `commit` is the commit protocol.",
            "",
            "| writer | prepare | stage | commit |",
            "|---|---|---|---|",
        ]
        for name, ph in phased:
            cells = " | ".join(f"{ph[k]['median']:.1f}" if k in ph else "" for k in ("prepare", "stage", "commit"))
            lines.append(f"| {name.replace('_', ' ')} | {cells} |")
    return lines


def write_report(results: dict[str, Any]) -> None:
    DOCS.mkdir(exist_ok=True)
    md = [
        "# Benchmarks",
        "",
        f"Measured on {results.get('machine', {}).get('cpus', '?')} CPUs, Python {results.get('machine', {}).get('python', '?')}, "
        f"PySpark 4.3, `{results.get('size')}` size, {results.get('date')}. Regenerate with `make bench ARGS=full`. "
        "Medians and tail percentiles over repetitions; ratios are against the anchor measured in the same run.",
        "",
    ]
    md += targets_section()
    t = results.get("throughput")
    if t:
        tp = t["throughput"]
        inp = tp["input"]
        md += [
            "## Throughput",
            "",
            f"{inp['files']} CSV files x {inp['rows_per_file']:,} rows ({inp['rows']:,} rows) -> Parquet, "
            f"{inp['files_per_trigger']} files per trigger ({inp['batches']} batches), {tp['rounds']} interleaved rounds.",
            "",
            *throughput_table(tp),
            "",
            f"Commit overhead of this sink inside those runs (everything but the Spark write): median "
            f"{tp['commit_overhead_ms']['median']:.1f} ms, p99 {tp['commit_overhead_ms']['p99']:.1f} ms.",
            "",
            *throughput_chart(results),
        ]
        tiny = t.get("tiny_batches")
        if tiny:
            img = _plot_tiny(tiny)
            md += [
                "## Tiny batches: per-batch cost as history grows",
                "",
                "| writer | first 10% median (ms) | last 10% median (ms) | first 10% p99 | last 10% p99 |",
                "|---|---|---|---|---|",
            ]
            for name, s in tiny["series"].items():
                md.append(
                    f"| {name.replace('_', ' ')} | {_ms(s['first_window_median'])} | {_ms(s['last_window_median'])} | "
                    f"{_ms(s['first_window_p99'])} | {_ms(s['last_window_p99'])} |"
                )
            for name, s in tiny["series"].items():
                if s.get("phases"):
                    parts = ", ".join(f"{phase} {p['first_window_median']:.1f} -> {p['last_window_median']:.1f}" for phase, p in s["phases"].items())
                    md += ["", f"{name.replace('_', ' ')}, by phase (median ms, first 10% -> last 10%): {parts}."]
            md += ["", f"![tiny batches]({img})" if img else "", ""]
    md += tiny_cost_section()
    c = results.get("commit")
    if c:
        o = c["overhead"]
        md += [
            "## Commit overhead by step (no Spark, rename mode, 10 files per batch)",
            "",
            f"Total: median **{o['total_ms']['median']:.2f} ms**, p99 **{o['total_ms']['p99']:.2f} ms** over {o['batches']} batches.",
            "",
        ]
        if o.get("floor_ms"):
            f, a = o["floor_ms"], o["above_floor_ms"]
            md += [
                "The limit on this disk, measured batch by batch in the same run (interleaved): the durable writes "
                "a batch needs, in the order it needs them, with the storage's own primitives and nothing else - "
                "the staged bytes synced while the claim is written, the renames and their directories synced, "
                f"the manifest entry, the commit record (the claim is deleted off the path, as the commit's "
                f"janitor does): median **{f['median']:.2f} ms**, "
                f"p99 {f['p99']:.2f} ms. The commit path above it: median **{a['median']:.2f} ms**, p95 {a['p95']:.2f} ms "
                "(per batch, commit minus floor).",
                "",
            ]
        md += [
            "Steps in WAL order; `wal` includes the fsync of the staged files, which runs beside the claim; "
            "`offsets`, `sources` and `commit` run concurrently, so their times overlap; since this release the "
            "first two are written without their fsync, which the janitor does before it deletes the claim, "
            "off the batch's path.",
            "",
            "| step | median (ms) | p99 (ms) |",
            "|---|---|---|",
        ]
        for step, s in o["steps_ms"].items():
            md.append(f"| {step} | {s['median']:.3f} | {s['p99']:.3f} |")
        sd = c.get("seeded")
        if sd:
            md += [
                "",
                "## Cost vs history: back to back on a manifest of N live files",
                "",
                "Batches of 10 files committed back to back (direct mode, synthetic files) on a manifest that already "
                "lists N live files (one `9.compact` with its reader index, as the sink leaves a table it wrote); every "
                "10th batch writes a `.compact` file listing them all.",
                "",
                "Prepared: the copy of the previous compact file "
                "runs in the background between commits, and each batch waits until the copy is as far as the batches "
                "are (after the k-th of the 9 batches before a compaction, (k - 1) / 8 of it); unprepared: the "
                "compaction batch copies it.",
                "",
                "The writer's start-up work (the copy for the next compaction starts when "
                "it opens the table; the modules an index build imports) ends before the first timed batch, as it does "
                "in a streaming query, whose first batch comes seconds after the sink opened the table. The goal is a "
                "p99 at 250k live files within 3x the p99 at 100.",
                "",
                "| live files | next compaction | batches | median (ms) | p99 (ms) | p99 vs 100 live files | compaction batches, median (ms) |",
                "|---|---|---|---|---|---|---|",
            ]
            for key, r in sd.items():
                n, how = key.split("-")
                anchor = sd.get(f"100-{how}")
                ratio = r["all_ms"]["p99"] / anchor["all_ms"]["p99"] if anchor and anchor["all_ms"]["p99"] else float("nan")
                md.append(
                    f"| {int(n):,} | {how} | {r['batches']} | {r['all_ms']['median']:.1f} | {r['all_ms']['p99']:.1f} | "
                    f"{ratio:.1f}x | {r['compaction_summary_ms']['median']:.1f} |"
                )
            md += [
                "",
                "Peak memory is measured per case in a fresh process by `python -m benchmarks.memory_probe` (these runs share one process): "
                "[Peak memory](#peak-memory-100k-and-1m-live-files).",
            ]
        md += memory_section(Path("benchmarks/results/memory.json"))
        sp3 = c.get("spaced_s3")
        s3 = c.get("seeded_s3")
        if s3:
            md += [
                "",
                "## Cost vs history on S3 (moto's server), back to back",
                "",
                "The same batches on moto's S3 server (in its own process on 127.0.0.1). `server-copy` (storage option "
                "`seo_server_side_copy`): right after a compaction the next compact object is begun in the background "
                "as a multipart upload whose first part the server copies from the one just written (`UploadPartCopy`); "
                "the compaction batch sends the deltas and its own records as the last part and completes it. "
                "`single-put` (the default): the compaction batch reads the previous object and sends the whole new one "
                "in one conditional PUT.",
                "",
                "moto answers each request in Python and keeps objects in memory; its copy of a "
                "part and its completion of an upload both copy the bytes in Python (completing with a 3 KB last part: "
                "262 ms after a 58 MB copy, 919 ms after 230 MB), and its background copy holds up the requests of the "
                "batches beside it. The figures show the requests work and how the compaction grows, not S3's latency.",
                "",
                "| live files | compact copy | batches | median (ms) | p99 (ms) | p99 vs 100 live files | compaction batches, median (ms) |",
                "|---|---|---|---|---|---|---|",
            ]
            for key, r in s3.items():
                n, how = key.split("-", 1)
                anchor = s3.get(f"100-{how}")
                ratio = r["all_ms"]["p99"] / anchor["all_ms"]["p99"] if anchor and anchor["all_ms"]["p99"] else float("nan")
                md.append(
                    f"| {int(n):,} | {how} | {r['batches']} | {r['all_ms']['median']:.1f} | {r['all_ms']['p99']:.1f} | "
                    f"{ratio:.1f}x | {r['compaction_summary_ms']['median']:.1f} |"
                )
        if sp3:
            comp = ", ".join(f"{ms:.0f}" for _, ms in sp3["compaction_ms"])
            md += [
                "",
                f"Batches 1 s apart on moto's server, {sp3['live_files'] - sp3['batches'] * 10:,} live files to start with, "
                f"server-side copy: compaction batches {comp} ms; other batches median "
                f"{sp3['other_batches_ms']['median']:.1f} ms, p99 {sp3['other_batches_ms']['p99']:.1f} ms.",
            ]
        h = c["history"]
        img = _plot_history(h)
        md += [
            "",
            "## Cost vs history (commit path, direct mode, synthetic files)",
            "",
            f"{h['batches']:,} batches back to back, {h['live_files']:,} live files at the end"
            + (" (time box reached)" if h["timed_out"] else "")
            + f"; largest compact file {h['largest_compact_bytes'] / 1e6:.0f} MB; peak RSS {h['peak_rss_mb']:.0f} MB.",
            "",
            "| window | median (ms) | p99 (ms) | max (ms) |",
            "|---|---|---|---|",
            f"| first {h['first_window_ms']['n']} batches | {h['first_window_ms']['median']:.2f} | {h['first_window_ms']['p99']:.2f} | "
            f"{h['first_window_ms']['max']:.1f} |",
            f"| last {h['last_window_ms']['n']} batches | {h['last_window_ms']['median']:.2f} | {h['last_window_ms']['p99']:.2f} | "
            f"{h['last_window_ms']['max']:.1f} |",
            "",
            f"![history]({img})" if img else "",
            "",
        ]
        if c.get("spaced_prepared"):
            md += [
                "## 1M live files, batches 1 s apart: prepared vs unprepared compaction",
                "",
                "The manifest starts with 1,000,000 live files; 60 batches of 10 files, one per second (a realistic trigger).",
                "",
                "| compaction | compaction batches (ms) | other batches median / p99 (ms) |",
                "|---|---|---|",
            ]
            for key, label in (("spaced_prepared", "prepared in the background"), ("spaced_unprepared", "at the batch (Spark's way)")):
                r = c[key]
                comp = ", ".join(f"{ms:.0f}" for _, ms in r["compaction_ms"])
                other = r["other_batches_ms"]
                md.append(f"| {label} | {comp} | {other['median']:.1f} / {other['p99']:.1f} |")
            md.append("")
        md += [
            "## Recovery time vs history",
            "",
            "A process opens a table whose last batch crashed after its WAL claim, rolls it forward and commits one new batch. "
            "Its close waits for the background work the open started (on a table with a large compact file: the copy for the "
            "next compaction, which stops at its next slice, and a module import).",
            "",
            "| batches of history | start (imports included) -> first new commit (s) | whole process, incl. draining background work at close (s) |",
            "|---|---|---|",
        ]
        for hist, r in c["recovery"].items():
            md.append(f"| {int(hist):,} | {r['process_start_to_first_commit_s']:.3f} | {r.get('whole_process_s', float('nan')):.3f} |")
        md.append("")
    r = results.get("readers")
    if r:
        img = _plot_readers(r)
        md += [
            "## Readers: committed file list",
            "",
            "| entries | read.files, JSON (s) | read.files, index (s) | Spark planning (s) | speed-up | first row, ours (s) | first row, Spark (s) |",
            "|---|---|---|---|---|---|---|",
        ]
        for n in sorted(r, key=int):
            row = r[n]
            md.append(
                f"| {int(n):,} | {row['ours_files_json_s']['median']:.3f} | {row['ours_files_index_s']['median']:.3f} | "
                f"{row['spark_planning_s']['median']:.2f} | {row['speedup_index']:.0f}x | "
                f"{row.get('ours_first_row_s', {}).get('median', float('nan')):.2f} | "
                f"{row.get('spark_first_row_s', {}).get('median', float('nan')):.2f} |"
            )
        md += ["", f"![readers]({img})" if img else "", ""]
    d = results.get("datasets")
    if d:
        md += [
            "## Dataset groups: one commit across many tables",
            "",
            f"One `DatasetSink` batch of {d['rows_per_batch']:,} rows split into N tables (two files each); medians over the "
            "batches after the first (which creates the tables).",
            "",
            "| tables | move_threads (publishes use 4x) | batch (ms) | Spark stage (ms) | commit (ms) | commit p95 (ms) | moves (ms) "
            "| table publishes (ms) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in d["series"]:
            st = r["steps_ms"]
            md.append(
                f"| {r['tables']} | {r['move_threads']} | {r['batch_ms']['median']:.0f} | {r['stage_ms']['median']:.0f} | "
                f"{r['commit_ms']['median']:.1f} | {r['commit_ms']['p95']:.1f} | {st.get('move', {}).get('median', 0):.1f} | "
                f"{st.get('members', {}).get('median', 0):.1f} |"
            )
        md.append("")
    dl = results.get("delta")
    if dl:
        md += delta_section(dl)
        md += delta_growth_section(Path("benchmarks/results/delta_growth.json"))
        md += iceberg_step_section()
    audit_json = Path("benchmarks/results/audit.json")  # bench_audit's own file when the run did not include it
    au = results.get("audit") or (json.loads(audit_json.read_text()) if audit_json.exists() else None)
    if au:
        from .bench_audit import report_lines

        md += report_lines(au)
    lg = results.get("log")
    if lg:
        md += [
            "## Log layer",
            "",
            f"`add` of a small batch file (fsync'd, exclusive): median {lg['add']['ms']['median']:.2f} ms, p99 {lg['add']['ms']['p99']:.2f} ms.",
            f"Strict pure-Python decode of a compact file: {lg['compact_read']['what']}: {lg['compact_read']['ms']['median'] / 1000:.1f} s "
            "(readers use Arrow or the Parquet index instead).",
            "",
        ]
    (DOCS / "benchmarks.md").write_text("\n".join(md) + "\n")
