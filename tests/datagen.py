"""Test input: CSV files whose every row has a unique id, so output can be counted exactly."""

from __future__ import annotations

import os
from pathlib import Path

PARTITION_VALUES = ["a b", "c%d", "é/ü", "plain"]


def write_csv_files(directory: Path | str, n_files: int, rows_per_file: int, *, start_file: int = 0) -> list[int]:
    """Files ``in_00000.csv``... with columns ``id,p,v``; returns the ids written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ids = []
    for f in range(start_file, start_file + n_files):
        lines = []
        for r in range(rows_per_file):
            row_id = f * rows_per_file + r
            ids.append(row_id)
            lines.append(f"{row_id},{PARTITION_VALUES[row_id % len(PARTITION_VALUES)]},{row_id * 0.5}")
        tmp = directory / f".in_{f:05d}.csv.tmp"
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(tmp, directory / f"in_{f:05d}.csv")  # appear atomically to the file source
    return ids


CSV_SCHEMA = "id LONG, p STRING, v DOUBLE"
