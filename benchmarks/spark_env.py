"""One SparkSession for a benchmark run, configured like the test suite (local[2])."""

from __future__ import annotations

import os
import sys


def spark_session(app: str = "seo-bench"):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def write_input(directory, n_files: int, rows_per_file: int) -> int:
    """CSV files with a unique id per row (same generator as the tests); returns the row count."""
    from tests.datagen import write_csv_files

    return len(write_csv_files(directory, n_files=n_files, rows_per_file=rows_per_file))
