"""Independent verification of a tortured table: it trusts none of the sink's own bookkeeping.

* The expected ids come from parsing the input CSV files directly.
* The manifest is parsed here with ``json`` (not the library's log layer) and every listed file
  is opened completely with pyarrow: a partial or unreadable visible file fails the check.
* Vanilla ``spark.read.parquet(table)`` and the library's ``read.arrow`` must return every id
  exactly once as well.
Then the library's own view must agree: ``verify_table`` finds no problem at all (no orphans,
no pending WAL, no staging left), ``seo audit --from 0`` no violation in the batches' ledgers,
and the commit records match the data they describe.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pyarrow.parquet as pq

from tests.torture.matrix_checks import audit_problems


def expected_ids(input_dir: Path) -> Counter:
    ids: Counter = Counter()
    for name in os.listdir(input_dir):
        if name.endswith(".csv") and not name.startswith("."):
            for line in (input_dir / name).read_text(encoding="utf-8").splitlines():
                if line:
                    ids[int(line.split(",", 1)[0])] += 1
    return ids


def manifest_files(table: Path, manifest: str = "_spark_metadata") -> list[tuple[str, int]]:
    """(absolute path, size) of every visible file, read with nothing but json and file names
    (``manifest``: ``_seo/manifest`` for a table written with ``spark_manifest=False``)."""
    meta = table / manifest
    names = [n for n in os.listdir(meta) if not n.startswith(".")]
    ids = {int(n.split(".")[0]): n for n in names}
    latest = max(ids)
    compacts = sorted(int(n.split(".")[0]) for n in names if n.endswith(".compact"))
    start = max((c for c in compacts if c <= latest), default=0)
    files = []
    for batch in range(start, latest + 1):
        lines = (meta / ids[batch]).read_text(encoding="utf-8").split("\n")
        assert lines[0] == "v1", f"{ids[batch]}: bad header {lines[0]!r}"
        for line in lines[1:]:
            if line:
                entry = json.loads(line)
                assert entry["path"].startswith("file://"), entry["path"]
                files.append((unquote(entry["path"][len("file://") :]), entry["size"]))
    return files


def verify_tortured_table(
    table: Path, input_dir: Path | None, spark=None, *, manifest: str = "_spark_metadata", expected: Counter | None = None
) -> dict:
    """``manifest``: where the manifest is (``_seo/manifest``: vanilla Spark, which reads only
    ``_spark_metadata``, is not asked); ``expected``: the input ids, if not CSV files in ``input_dir``."""
    from streaming_exactly_once import read
    from streaming_exactly_once.log.compaction import is_compaction_batch
    from streaming_exactly_once.maintenance.verify import verify_table
    from streaming_exactly_once.manifest.manifest_log import ManifestLog
    from streaming_exactly_once.storage import open_storage
    from streaming_exactly_once.table.commits_log import CommitsLog

    if expected is None:
        assert input_dir is not None
        expected = expected_ids(input_dir)
    assert all(c == 1 for c in expected.values()), "input generator produced duplicate ids"
    # 1. independent manifest parse + full read of every visible file
    independent: Counter = Counter()
    for path, size in manifest_files(table, manifest):
        assert os.path.getsize(path) == size, f"{path}: size {os.path.getsize(path)} != manifest {size}"
        independent.update(pq.read_table(path, columns=["id"]).column("id").to_pylist())
    result = {"expected_rows": sum(expected.values())}

    def compare(name: str, got: Counter) -> None:
        dup = sum(c - 1 for c in got.values() if c > 1)
        lost = len(set(expected) - set(got))
        extra = len(set(got) - set(expected))
        result[name] = {"rows": sum(got.values()), "duplicates": dup, "losses": lost, "unexpected": extra}
        assert dup == 0 and lost == 0 and extra == 0, f"{name}: {result[name]}"

    compare("independent_pyarrow", independent)
    compare("library_arrow", Counter(read.arrow(str(table), columns=["id"]).column("id").to_pylist()))
    if spark is not None and manifest == "_spark_metadata":
        compare("vanilla_spark", Counter(r.id for r in spark.read.parquet(str(table)).select("id").collect()))
    # 2. the library's own checks
    storage = open_storage(str(table))
    report = verify_table(storage)
    assert report.problems == [], [p.to_json() for p in report.problems][:5]
    violations = audit_problems(storage)
    assert not violations, f"seo audit --from 0 of {table}: {violations[:5]}"
    # 3. commit records describe the data
    commits = CommitsLog(storage, interval=10)
    log = ManifestLog(storage, directory=manifest)
    records = [commits.record(b) for b in commits.list_batch_ids()]
    records = [r for r in records if r is not None]
    assert sum(r.num_rows for r in records) == sum(expected.values()), "commit records' row counts differ from the data"
    checked = 0
    root = storage.root_uri
    for record in records:
        if is_compaction_batch(record.batch_id, log.interval):
            continue
        ids = []
        for entry in log.read(record.batch_id):
            ids += pq.read_table(unquote(entry.path[len("file://") :]), columns=["id"]).column("id").to_pylist()
        assert len(ids) == record.num_rows, f"batch {record.batch_id}: {len(ids)} rows, record says {record.num_rows}"
        marks = record.watermarks.get("id", {})
        if not ids:  # committed without rows: a new query's first batch whose rows were all dropped as written
            assert marks.get("min") is None and marks.get("max") is None, f"batch {record.batch_id} has no rows, watermarks {marks}"
            continue
        assert (marks.get("min"), marks.get("max")) == (min(ids), max(ids)), f"batch {record.batch_id} watermarks {marks}"
        checked += 1
    result["batches"] = len(records)
    result["batches_watermark_checked"] = checked
    result["root"] = root
    return result


def verify_tortured_group(root: Path, input_dir: Path, spark=None) -> dict:
    """A dataset group written by ``tests.sink.driver --forks``: the ``raw`` output is checked
    like a single table; the ``byp`` output's tables together must hold every id exactly once;
    and the group's own verify must find nothing."""
    from streaming_exactly_once import read
    from streaming_exactly_once.maintenance.verify import verify_table
    from streaming_exactly_once.storage import open_storage

    result = {"raw": verify_tortured_table(root / "raw", input_dir, spark)}
    expected = expected_ids(input_dir)
    ours: Counter = Counter()
    theirs: Counter = Counter()
    tables = sorted(p.parent for p in (root / "byp").glob("*/_spark_metadata"))
    for table in tables:
        ours.update(read.pandas(str(table))["id"].tolist())
        if spark is not None:
            theirs.update(r.id for r in spark.read.schema("id LONG").json(str(table)).collect())
    for name, got in (("byp_library", ours), ("byp_vanilla_spark", theirs if spark is not None else ours)):
        dup = sum(c - 1 for c in got.values() if c > 1)
        lost = len(set(expected) - set(got))
        extra = len(set(got) - set(expected))
        result[name] = {"rows": sum(got.values()), "duplicates": dup, "losses": lost, "unexpected": extra, "tables": len(tables)}
        assert dup == 0 and lost == 0 and extra == 0, f"{name}: {result[name]}"
    report = verify_table(open_storage(str(root)))
    assert report.problems == [], [p.to_json() for p in report.problems][:5]
    violations = audit_problems(open_storage(str(root)))
    assert not violations, f"seo audit --from 0 of the group {root}: {violations[:5]}"
    result["expected_rows"] = sum(expected.values())
    result["vanilla_spark"] = (
        {k: result["raw"]["vanilla_spark"][k] + result["byp_vanilla_spark"][k] for k in ("duplicates", "losses")}
        if spark is not None
        else result["raw"]["library_arrow"]
    )
    result["independent_pyarrow"] = result["raw"]["independent_pyarrow"]
    return result


def verify_tortured_delta(table: Path, input_dir: Path, *, manifest: str = "_spark_metadata") -> dict:
    """A ``format="delta"`` tortured table, read the way Delta readers read it (no Spark, none of
    the library's code): delta-rs and polars must return every input id exactly once; every
    manifest batch holding files must be exactly one Delta version carrying our transaction, and
    no other version may exist; the files the latest Delta version reads must be the files
    ``_spark_metadata`` lists (both logs describe the same table)."""
    import polars as pl

    from tests.delta.readback import batch_commits, delta_commits, delta_ids

    expected = expected_ids(input_dir)
    result: dict = {"expected_rows": sum(expected.values())}
    for name, got in (
        ("delta_rs", delta_ids(table)),
        ("polars_delta", Counter(pl.read_delta(str(table)).get_column("id").to_list())),
    ):
        dup = sum(c - 1 for c in got.values() if c > 1)
        lost = len(set(expected) - set(got))
        extra = len(set(got) - set(expected))
        result[name] = {"rows": sum(got.values()), "duplicates": dup, "losses": lost, "unexpected": extra}
        assert dup == 0 and lost == 0 and extra == 0, f"{name}: {result[name]}"
    names = [n for n in os.listdir(table / manifest) if n[:1].isdigit()]
    latest = max(int(n.split(".")[0]) for n in names)
    by_batch = batch_commits(table)  # asserts one txn of ours per commit and no batch in two versions
    commits = delta_commits(table)
    # a batch committed without files (e.g. a new query's first batch that only re-read committed
    # input) has no Delta version of its own: its manifest file holds no entry
    holding = [b for b in range(latest + 1) if not _manifest_batch_is_empty(table / manifest, b)]
    assert sorted(by_batch) == holding, f"manifest batches with files {holding}, Delta has {sorted(by_batch)}"
    assert len(commits) == len(holding), f"{len(commits)} Delta versions for {len(holding)} manifest batches with files"
    assert all(by_batch[b] == version for version, b in enumerate(holding)), "a Delta version that is not one batch"
    live: set[str] = set()
    for commit in commits:
        live -= {unquote(p) for p in commit.removes}
        live |= {unquote(p) for p in commit.adds}
    root = str(table.resolve())
    listed = {os.path.relpath(os.path.realpath(path), root) for path, _ in manifest_files(table, manifest)}
    assert live == listed, f"Delta reads {len(live - listed)} files the manifest does not list, misses {len(listed - live)}"
    result["delta_versions"] = len(commits)
    result["manifest_batches"] = latest + 1
    result["manifest_batches_with_files"] = len(holding)
    return result


def _manifest_batch_is_empty(manifest: Path, batch: int) -> bool:
    """Whether manifest batch ``batch`` is a file holding only its version line (a compact file,
    or a batch file removed by retention, is not known to be empty)."""
    path = manifest / str(batch)
    return path.exists() and not [line for line in path.read_text().splitlines()[1:] if line.strip()]


def produced_records(kafka_dir: Path) -> dict[tuple[str, int], list[int]]:
    """Every record of the Kafka stand-in's partitions, (topic, partition) -> ids by offset, read
    from its files directly (``streaming_exactly_once.testing.fake_kafka``: a line per record, nothing expired)."""
    out = {}
    for topic in sorted(os.listdir(kafka_dir)):
        for name in os.listdir(kafka_dir / topic):
            if name.isdigit():
                text = (kafka_dir / topic / name).read_text(encoding="utf-8")
                assert text.endswith("\n") or not text, f"{topic}/{name}: a record cut short"
                out[(topic, int(name))] = [int(v) for v in text.splitlines()]
    return out


def verify_tortured_kafka(table: Path, kafka_dir: Path, spark=None) -> dict:
    """A table written from the Kafka stand-in (``tests.sink.driver --kafka``): every produced
    record once (``verify_tortured_table``: vanilla Spark, an independent pyarrow read of every
    manifest file, the library's reader, its own verify); every row's ``topic``/``partition``/
    ``offset`` is where its id was produced; and the table's committed offset marks - parsed
    here from ``_seo/offsets`` (records of published batches only) and as ``seo status`` shows
    them - are the end of every partition."""
    from streaming_exactly_once.maintenance.status import table_status
    from streaming_exactly_once.storage import open_storage

    produced = produced_records(kafka_dir)
    expected = Counter(i for ids in produced.values() for i in ids)
    result = verify_tortured_table(table, None, spark, expected=expected)
    # provenance: the row at (topic, partition, offset) carries the id produced there, once
    where: Counter = Counter()
    for path, _size in manifest_files(table):
        rows = pq.read_table(path, columns=["id", "topic", "partition", "offset"]).to_pylist()
        for row in rows:
            key = (row["topic"], row["partition"], row["offset"])
            ids = produced.get((row["topic"], row["partition"]), [])
            assert 0 <= row["offset"] < len(ids) and ids[row["offset"]] == row["id"], f"row {row} was not produced at {key}"
            where[key] += 1
    assert all(c == 1 for c in where.values()) and len(where) == sum(expected.values()), "a source record twice or never"
    ends = {f"{topic}/{p}": len(ids) for (topic, p), ids in produced.items()}
    # the marks, parsed with json: the highest end offset of each partition over the offsets
    # records of published batches (an intent record of a batch never published does not count)
    meta = table / "_spark_metadata"
    published = max(int(n.split(".")[0]) for n in os.listdir(meta) if n[:1].isdigit())
    marks: dict[str, int] = {}
    offsets_dir = table / "_seo" / "offsets"
    for name in os.listdir(offsets_dir):
        if not name[:1].isdigit():
            continue
        lines = (offsets_dir / name).read_text(encoding="utf-8").split("\n")
        assert lines[0] == "v1", f"_seo/offsets/{name}: bad header {lines[0]!r}"
        for line in lines[1:]:
            record = json.loads(line) if line else None
            if record is None or record["batchId"] > published:
                continue
            for source in record.get("sourceOffsets") or []:
                for topic, parts in (json.loads(source) if source else {}).items():
                    for p, offset in parts.items():
                        marks[f"{topic}/{p}"] = max(offset, marks.get(f"{topic}/{p}", -1))
    assert marks == ends, f"the table's committed offsets {marks} are not the ends of the partitions {ends}"
    status = table_status(open_storage(str(table)))["sourceOffsets"]
    assert status == ends, f"seo status shows offsets {status}, the partitions end at {ends}"
    result["partitions"] = len(ends)
    result["offsets"] = ends
    return result
