"""Run inside a venv of the install matrix as ``python smoke.py EXTRA WORK [OPTIONS_JSON]``: what
``[spark,arrow]`` plus ``EXTRA`` enables, as a user reaches it, using nothing but the installed
package (this file imports nothing of the checkout).

* ``delta`` / ``iceberg`` / ``s3``: two batches through ``ExactlyOnceSink`` and Spark, read back
  with the format's own reader (delta-rs, pyiceberg) or from S3, and ``seo verify``;
* ``polars`` / ``duckdb``: the reader on the table ``WORK/table`` (the demo's), all of it and as
  of batch 0;
* every feature this venv has no extra for is refused with its ``pip install`` line, and a
  refused sink writes nothing.

``OPTIONS_JSON``: the S3 table's storage options (a moto server's endpoint and bucket). Prints
one JSON document of what it saw; any failure is an exception (exit code 1).
"""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from streaming_exactly_once import extras, read
from streaming_exactly_once.errors import MissingDependencyError


def seo(*args: str) -> tuple[int, str]:
    from streaming_exactly_once.cli.main import main

    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue()


def two_batches(table: str, work: Path, **options: Any) -> list[int]:
    """Two CSV files, one per batch, streamed into ``table``; the ids written."""
    from pyspark.sql import SparkSession

    from streaming_exactly_once import ExactlyOnceSink

    landing = work / "landing"
    landing.mkdir(parents=True)
    for n in range(2):
        (landing / f"part-{n}.csv").write_text("id,p\n" + "".join(f"{n * 10 + i},{'ab'[i % 2]}\n" for i in range(10)))
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    stream = spark.readStream.schema("id LONG, p STRING").option("header", True).option("maxFilesPerTrigger", 1).csv(str(landing))
    sink = ExactlyOnceSink(table, partition_by=["p"], **options)
    query = sink.start(stream, checkpoint_location=str(work / "checkpoint"), trigger={"availableNow": True})
    query.awaitTermination()
    sink.stop()
    spark.stop()
    return list(range(20))


def verified(table: str, *cli_options: str) -> None:
    code, output = seo(*cli_options, "verify", table)
    assert code == 0, output


def smoke_delta(work: Path) -> dict[str, Any]:
    import deltalake

    table = str(work / "delta")
    ids = two_batches(table, work, format="delta")
    delta = deltalake.DeltaTable(table)
    assert delta.version() == 1, delta.history()
    assert sorted(delta.to_pyarrow_table().column("id").to_pylist()) == ids
    assert read.delta_version(table, as_of=0) == 0
    verified(table)
    return {"deltaVersion": delta.version(), "rows": len(ids)}


def smoke_iceberg(work: Path) -> dict[str, Any]:
    from pyiceberg.table import StaticTable

    table = str(work / "iceberg")
    ids = two_batches(table, work, format="iceberg")
    latest = max((work / "iceberg" / "metadata").glob("v*.metadata.json"), key=lambda p: int(p.name[1:].split(".")[0]))
    iceberg = StaticTable.from_metadata(str(latest))
    assert len(iceberg.metadata.snapshots) == 2
    assert sorted(iceberg.scan().to_arrow().column("id").to_pylist()) == ids
    assert read.iceberg_snapshot(table, as_of=0) == iceberg.metadata.snapshots[0].snapshot_id
    verified(table)
    return {"snapshots": len(iceberg.metadata.snapshots), "rows": len(ids)}


def smoke_s3(work: Path, options: dict[str, Any]) -> dict[str, Any]:
    table = f"s3://{options.pop('bucket')}/events"
    ids = two_batches(table, work, storage_options=options)
    assert sorted(read.arrow(table, storage_options=options).column("id").to_pylist()) == ids
    assert len(read.batches(table, storage_options=options)) == 2
    verified(table, "-o", f"endpoint_url={options['endpoint_url']}", "-o", f"key={options['key']}", "-o", f"secret={options['secret']}")
    return {"rows": len(ids)}


def smoke_reader(engine: str, work: Path) -> dict[str, Any]:
    table = str(work / "table")
    everything = read.arrow(table).num_rows
    if engine == "polars":
        frame = read.polars(table)
        lazy = read.polars(table, lazy=True).collect()
        first = read.polars(table, as_of=0)
        assert frame.height == lazy.height == everything
        return {"rows": frame.height, "asOf0": first.height}
    import duckdb

    con = duckdb.connect()
    read.duckdb(table, con)
    read.duckdb(table, con, name="first", as_of=0)
    rows = con.execute("SELECT count(*) FROM seo_table").fetchall()[0][0]
    first = con.execute("SELECT count(*) FROM first").fetchall()[0][0]
    assert rows == everything and 0 < first < rows
    return {"rows": rows, "asOf0": first}


def refusals(work: Path) -> list[str]:
    """Every feature this venv lacks the extra of, reached as a user reaches it."""
    from streaming_exactly_once import ExactlyOnceSink

    new, table = work / "new", str(work / "table")
    uris = {"s3": "s3://bucket/t", "azure": "abfss://c@account.dfs.core.windows.net/t", "gcs": "gs://bucket/t"}
    cases = {
        "delta": [lambda: ExactlyOnceSink(str(new), format="delta")],
        "iceberg": [lambda: ExactlyOnceSink(str(new), format="iceberg")],
        "polars": [lambda: read.polars(table)],
        "duckdb": [lambda: read.duckdb(table)],
        **{k: [lambda u=u: ExactlyOnceSink(u), lambda u=u: read.arrow(u)] for k, u in uris.items()},
    }
    refused = []
    for feature, calls in cases.items():
        if extras.missing(feature) is None:
            continue
        for call in calls:
            try:
                call()
            except MissingDependencyError as exc:
                assert extras.install_line(extras.FEATURES[feature].extra) in str(exc), exc
                assert not new.exists(), f"the refused {feature} sink wrote {new}"
                refused.append(feature)
                continue
            raise AssertionError(f"{feature} was not refused in a venv without its extra")
    return sorted(set(refused))


def main(extra: str, work: Path, options: dict[str, Any]) -> dict[str, Any]:
    assert extras.missing(extra) is None, f"[{extra}] is not installed in this venv"
    if extra == "delta":
        seen = smoke_delta(work)
    elif extra == "iceberg":
        seen = smoke_iceberg(work)
    elif extra == "s3":
        seen = smoke_s3(work, options)
    else:
        seen = smoke_reader(extra, work)
    return {"extra": extra, "seen": seen, "refused": refusals(work)}


if __name__ == "__main__":
    given = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    print(json.dumps(main(sys.argv[1], Path(sys.argv[2]), given)))
