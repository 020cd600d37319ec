"""Row counts and watermarks of a batch, computed in the same pass that writes it.

``DataFrame.observe`` attaches aggregate expressions to the plan; Spark evaluates them while the
write job runs and hands them back afterwards - no second scan. For each configured watermark
column we keep min and max (the low and high watermark of what this batch committed).
"""

from __future__ import annotations

import uuid
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, functions as F

from .arrow_file_writer import json_value

ROWS = "rows"
UNATTRIBUTED = "unattributed"


class BatchObservation:
    """Observe rows (and min/max of watermark columns) of ``df`` as it is written."""

    def __init__(self, watermark_columns: tuple[str, ...]) -> None:
        self.watermark_columns = watermark_columns
        self.observation = Observation(f"seo-{uuid.uuid4().hex[:12]}")

    def attach(self, df: DataFrame, *, extra: dict[str, Column] | None = None) -> DataFrame:
        exprs = [F.count(F.lit(1)).alias(ROWS)]
        for column in self.watermark_columns:
            exprs.append(F.min(F.col(column)).alias(f"min:{column}"))
            exprs.append(F.max(F.col(column)).alias(f"max:{column}"))
        for name, expr in (extra or {}).items():
            exprs.append(expr.alias(name))
        return df.observe(self.observation, *exprs)

    def result(self) -> tuple[int, dict[str, dict[str, Any]], dict[str, Any]]:
        """(rows, watermarks {col: {min, max}}, extra metrics)."""
        values = self.observation.get or {}
        rows = int(values.get(ROWS) or 0)
        marks: dict[str, dict[str, Any]] = {}
        for column in self.watermark_columns:
            marks[column] = {
                "min": json_value(values.get(f"min:{column}")),
                "max": json_value(values.get(f"max:{column}")),
            }
        extra = {k: v for k, v in values.items() if k != ROWS and not k.startswith(("min:", "max:"))}
        return rows, marks, extra
