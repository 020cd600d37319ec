"""Each fault ``seo audit`` checks for, planted by hand in a table of each format - parquet
(``_spark_metadata`` only), ``format="delta"``, ``format="iceberg"`` - written through the commit
layer (no Spark: a Kafka-like source's batches, partition t/0, offsets [10 b, 10 b + 10)). The
audit must exit 1 and name the batch and the file or the offsets of every one.

A fault of the Delta or Iceberg table itself (formats disagreeing, a file live twice in it) has
no parquet cell: such a table has no second format. Delta dedupes its adds by path, so a file
twice is planted there in the manifest only; Iceberg takes a second append of the same path
(its readers read it twice), so it gets that cell too.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace

import pytest

from streaming_exactly_once.cli.main import main
from streaming_exactly_once.commit.rewrites.data_compaction import CompactionPolicy
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.table.ledger import ledger_path, read_ledger
from tests.commit.helpers import make_committer, stage_file
from tests.delta.helpers import SCHEMA, delta_committer, parquet
from tests.iceberg.table_helpers import iceberg_committer

Q = "fa017000-0000-0000-0000-000000000000"
FORMATS = ("parquet", "delta", "iceberg")
BATCHES = 4  # compact interval 3: batch 2 is a compaction batch, batch 3 a delta file after it


def committer(storage, fmt: str, **opts):
    if fmt == "delta":
        return delta_committer(storage, **opts)
    if fmt == "iceberg":
        return iceberg_committer(storage, **opts)
    return make_committer(storage, partition_by=("p",), **opts)


def commit(c, b: int, *, start: int, end: int) -> None:
    """Batch ``b`` of the query: offsets [start, end) of t/0 in two files, ids = offsets."""
    c.ensure_open()
    try:
        with c.batch(Q, b, mode="rename") as attempt:
            attempt.offsets = replace(attempt.offsets, source_offsets=(json.dumps({"t": {"0": end}}),))
            attempt.ledger = replace(attempt.ledger, start={"t/0": start})
            ids = list(range(start, end))
            half = len(ids) // 2
            staged = [
                stage_file(c.storage, attempt, f"p=a/part-{n:05d}-{b}-{attempt.attempt}.c000.snappy.parquet", parquet(chunk))
                for n, chunk in enumerate((ids[:half], ids[half:]))
            ]
            c.commit(attempt, staged, num_rows=len(ids), schema=SCHEMA)
    except BaseException:
        c.invalidate()
        raise


def table(tmp_path, fmt: str, *, compaction: bool = False, last: tuple[int, int] | None = None, batches: int = BATCHES, between=None, **opts):
    """A table of ``batches`` batches (``last``: the last one's offsets instead of the next ten);
    ``compaction``: batch 2 rewrites the four files of batches 0 and 1 into one; ``between(storage,
    b)``: called after each batch; ``opts``: more committer options."""
    storage = open_storage(str(tmp_path / fmt))
    if compaction:
        opts["compaction"] = CompactionPolicy(target_size=1 << 20, min_files=4, min_age_ms=0, max_bytes=1 << 20)
    c = committer(storage, fmt, compact_interval=3, **opts)
    for b in range(batches):
        start, end = last if last is not None and b == batches - 1 else (10 * b, 10 * b + 10)
        commit(c, b, start=start, end=end)
        c.janitor.drain()
        if between is not None:
            between(storage, b)
    c.close()
    return storage


def audit(storage):
    """``seo --json audit ROOT --from 0 --no-record`` in this process: (exit code, violations)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(["--json", "audit", storage.root_uri, "--from", "0", "--no-record"])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, json.loads(out.getvalue())["violations"]


def manifest_lines(storage, name: str) -> list[str]:
    return storage.read_bytes(f"_spark_metadata/{name}").decode().split("\n")


# -- the planted faults: each returns the (check, batch) and a text the audit must name --------


def published_twice(tmp_path, fmt):
    """Batch 1's first file listed again by batch 3's manifest file."""
    storage = table(tmp_path, fmt)
    again = manifest_lines(storage, "1")[1]
    storage.atomic_write("_spark_metadata/3", "\n".join([*manifest_lines(storage, "3"), again]).encode())
    path = read_ledger(storage, 1).files[0].path
    return storage, [("files", 3, path), ("files", None, f"{path} is live 2 times in the manifest")]


def published_twice_in_iceberg(tmp_path, fmt):
    """Batch 1's first file appended to the Iceberg table again by another writer."""
    from streaming_exactly_once.iceberg.target import IcebergFile, IcebergTarget

    storage = table(tmp_path, fmt)
    f = read_ledger(storage, 1).files[0]
    other = IcebergTarget(storage, "streaming-exactly-once:other")
    other.commit(0, [IcebergFile(f.path, f.size, 0, f.rows)], schema_json=SCHEMA, partition_by=["p"], metadata={})
    return storage, [("files", None, f"{f.path} is live 2 times in the Iceberg table")]


def offsets_skipped(tmp_path, fmt):
    storage = table(tmp_path, fmt, last=(35, 45))
    return storage, [("offsets", 3, "records [30, 35) were never written")]


def offsets_overlap(tmp_path, fmt):
    storage = table(tmp_path, fmt, last=(25, 40))
    return storage, [("offsets", 3, "offsets [25, 30) of t/0")]


def compaction_drops_a_row(tmp_path, fmt):
    """Batch 2's rewrite records one row fewer in its new file than the files it replaced held."""
    storage = table(tmp_path, fmt, compaction=True)
    path = tmp_path / fmt / ledger_path(2)
    obj = json.loads(path.read_text()[3:])
    assert obj["compaction"]["rowsReplaced"] == obj["compaction"]["rowsAdded"] == 20, obj["compaction"]
    obj["compaction"]["rowsAdded"] = 19
    path.write_text("v1\n" + json.dumps(obj, separators=(",", ":")))
    return storage, [("compaction", 2, "holding 20 rows by files holding 19")]


def file_removed(tmp_path, fmt):
    storage = table(tmp_path, fmt)
    path = read_ledger(storage, 1).files[0].path
    storage.delete(path)
    return storage, [("files", 1, path)]


def batch_without_ledger(tmp_path, fmt):
    storage = table(tmp_path, fmt)
    storage.delete(ledger_path(1))
    return storage, [("ledger", 1, "Manifest batch 1 has no ledger")]


def formats_disagree(tmp_path, fmt):
    """Another writer adds a file to the Delta or the Iceberg table only."""
    storage = table(tmp_path, fmt)
    extra = "p=a/stray.parquet"
    if fmt == "delta":
        import pyarrow as pa
        from deltalake import write_deltalake

        write_deltalake(storage.root_uri, pa.table({"id": pa.array([10_000], pa.int64()), "p": ["a"]}), mode="append", partition_by=["p"])
        extra = "Delta table holds"
    else:
        from streaming_exactly_once.iceberg.target import IcebergFile, IcebergTarget

        data = parquet([10_000])
        storage.put_if_absent(extra, data)
        other = IcebergTarget(storage, "streaming-exactly-once:other")
        other.commit(0, [IcebergFile(extra, len(data), 0, 1)], schema_json=SCHEMA, partition_by=["p"], metadata={})
    return storage, [("formats", BATCHES - 1, extra)]


FAULTS = {
    "published-twice": (published_twice, FORMATS),
    "published-twice-in-the-format": (published_twice_in_iceberg, ("iceberg",)),
    "offsets-skipped": (offsets_skipped, FORMATS),
    "offsets-overlap": (offsets_overlap, FORMATS),
    "compaction-drops-a-row": (compaction_drops_a_row, FORMATS),
    "file-removed": (file_removed, FORMATS),
    "batch-without-ledger": (batch_without_ledger, FORMATS),
    "formats-disagree": (formats_disagree, ("delta", "iceberg")),
}
CELLS = [pytest.param(fault, fmt, id=f"{fault}-{fmt}") for fault, (_, formats) in FAULTS.items() for fmt in formats]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_tables_the_faults_are_planted_in_audit_clean(tmp_path, fmt):
    for kw in ({}, {"compaction": True}):
        storage = table(tmp_path / str(len(kw)), fmt, **kw)
        assert audit(storage) == (0, [])
    assert read_ledger(storage, 2).compaction is not None


@pytest.mark.parametrize(("fault", "fmt"), CELLS)
def test_the_audit_names_each_planted_fault_in_each_format(tmp_path, fault, fmt):
    if fmt != "parquet":
        pytest.importorskip("deltalake" if fmt == "delta" else "pyiceberg")
    plant, _ = FAULTS[fault]
    storage, wanted = plant(tmp_path, fmt)
    code, violations = audit(storage)
    assert code == 1, violations
    for check, batch, text in wanted:
        named = [v for v in violations if v["check"] == check and v["batchId"] == batch and text in v["message"]]
        assert named, (check, batch, text, violations)


@pytest.mark.parametrize("fmt", ["parquet"])
def test_a_batch_without_its_ledger_is_one_violation_and_not_also_a_gap_at_the_next_batch(tmp_path, fmt):
    storage, wanted = batch_without_ledger(tmp_path, fmt)
    code, violations = audit(storage)
    assert code == 1 and [(v["check"], v["batchId"]) for v in violations] == [(check, batch) for check, batch, _ in wanted], violations
