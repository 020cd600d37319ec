"""Two plots for ``docs/benchmarks.md``: throughput against plain ``foreachBatch``, and the Delta and
Iceberg steps as their logs grow. Drawn from the results files the benchmarks wrote
(``results.json``, ``delta_growth.json``, ``iceberg_step.json``); none is measured here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path("benchmarks/results")
IMG = Path("docs/img")


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(plt: Any, fig: Any, name: str) -> str:
    IMG.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(IMG / f"{name}.png", dpi=110)
    plt.close(fig)
    return f"img/{name}.png"


def throughput_chart(results: dict[str, Any]) -> list[str]:
    """Wall time of each writer over plain ``foreachBatch`` (1.0; median of interleaved rounds in one run):
    the Parquet writers of the throughput benchmark and the Delta writers of the Delta one."""
    plt = _pyplot()
    groups: list[tuple[str, dict[str, float]]] = []
    tp = results.get("throughput", {}).get("throughput")
    if tp:
        groups.append(("Parquet (manifest)", {n: w["ratio_vs_plain"] for n, w in tp["writers"].items()}))
    dl = results.get("delta", {}).get("throughput")
    if dl:
        groups.append(("Delta", {n: w["ratio_vs_plain"] for n, w in dl["writers"].items()}))
    if plt is None or not groups:
        return []
    fig, axes = plt.subplots(1, len(groups), figsize=(4.5 * len(groups), 3.6), squeeze=False)
    for ax, (title, ratios) in zip(axes[0], groups, strict=True):
        names = list(ratios)
        ax.barh([n.replace("_", " ") for n in names], [ratios[n] for n in names], color="#4a7bb7")
        ax.axvline(1.0, color="black", linewidth=0.8)
        for y, n in enumerate(names):
            ax.text(ratios[n], y, f" {ratios[n]:.2f}x", va="center")
        ax.set_xlim(0, max(ratios.values()) * 1.25)
        ax.set_title(title)
        ax.set_xlabel("wall time / plain foreachBatch")
        ax.grid(alpha=0.3, axis="x")
    img = _save(plt, fig, "throughput")
    return [f"![throughput against plain foreachBatch]({img})", ""]


def _delta_series() -> tuple[list[int], list[float], list[float]] | None:
    path = RESULTS / "delta_growth.json"
    if not path.exists():
        return None
    g = json.loads(path.read_text())
    rows = sorted(g["at_versions"].items(), key=lambda kv: int(kv[0]))
    return [int(n) for n, _ in rows], [r["delta_ms"]["median"] for _, r in rows], [r["delta_ms"]["p95"] for _, r in rows]


def _iceberg_series() -> dict[str, list[dict[str, Any]]] | None:
    path = RESULTS / "iceberg_step.json"
    return json.loads(path.read_text()) if path.exists() else None


def step_growth_chart() -> list[str]:
    """The Delta step against Delta versions, and the Iceberg step against batches with
    snapshot expiry (the table keeps a bounded number) and without it (every snapshot kept)."""
    plt = _pyplot()
    delta, iceberg = _delta_series(), _iceberg_series()
    if plt is None or (delta is None and iceberg is None):
        return []
    fig, ax = plt.subplots(figsize=(8, 4))
    if delta is not None:
        xs, median, p95 = delta
        ax.plot(xs, median, marker="o", label="Delta step, median")
        ax.plot(xs, p95, marker="o", linestyle="--", label="Delta step, p95")
    labels = (("expiry", "Iceberg step, median, by batches (100-200 snapshots kept)"), ("history", "Iceberg step, median, by snapshots kept"))
    for series, label in labels:
        rows = (iceberg or {}).get(series) or []
        if rows:
            ax.plot(
                [r["snapshots"] if series == "history" else r["batches"] for r in rows], [r["step_median_ms"] for r in rows], marker="s", label=label
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("Delta versions / Iceberg batches or snapshots kept")
    ax.set_ylabel("step time per batch, ms")
    ax.set_title("The format step as the table's log grows")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    img = _save(plt, fig, "format_step_growth")
    return [f"![format step versus versions]({img})", ""]


def iceberg_step_section() -> list[str]:
    """The Iceberg step as the table grows (``benchmarks.bench_iceberg_step``), and the chart."""
    data = _iceberg_series()
    if data is None:
        return []
    md = [
        "### Iceberg step as the table grows",
        "",
        "One-file batches through the commit layer (`python -m benchmarks.bench_iceberg_step --series both`), on a machine "
        "shared with other runs. `expiry`: snapshots expired every 100 batches, the newest 100 kept (so 100 to 200 are "
        "kept between expiries); `history`: none expired, and after batch 1,000 the history is padded to 10,000 snapshots "
        "(another writer's), so the metadata file Iceberg rewrites at every commit holds them all.",
        "",
        "| series | batches | snapshots kept | step median (ms) | p95 (ms) | metadata file (KB) |",
        "|---|---|---|---|---|---|",
    ]
    for series in ("expiry", "history"):
        for r in data.get(series) or []:
            md.append(
                f"| {series} | {r['batches']:,} | {r['snapshots']:,} | {r['step_median_ms']:.1f} | {r['step_p95_ms']:.1f} | "
                f"{r['metadata_file_kb']:.0f} |"
            )
    expiry = data.get("expiry") or []
    if len(expiry) >= 2:
        first, last = expiry[0], expiry[-1]
        md += [
            "",
            f"With expiry, {last['batches']:,} versus {first['batches']:,} batches: median "
            f"{last['step_median_ms'] / first['step_median_ms']:.2f}x - the step follows the snapshots kept "
            f"({first['snapshots']} then {last['snapshots']}) and the metadata file ({first['metadata_file_kb']:.0f} then "
            f"{last['metadata_file_kb']:.0f} KB), not the batches: Iceberg's format rewrites the whole metadata file, "
            "snapshot list included, at every commit, for every writer.",
        ]
    return [*md, "", *step_growth_chart()]
