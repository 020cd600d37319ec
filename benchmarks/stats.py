"""Summary statistics used by every benchmark: medians and tail percentiles, not means."""

from __future__ import annotations

import statistics


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "median": statistics.median(values) if values else float("nan"),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values) if values else float("nan"),
    }
