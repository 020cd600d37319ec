"""EIO at every durable write of the commit path, and a power cut at every commit boundary.

``tests.commit.power_cut_runs`` says what a run does and checks. Every durable write a run
makes - data files, intents, moved names, the WAL claim, manifest and compact files and their
prepared work files, offsets, sources and commit records, verdicts, epochs - is named below,
each with the table kinds that make it; a recording run per kind checks the list is complete.
Each write then fails once with EIO (Linux's semantics: the next fsync of that file succeeds,
its bytes are lost at the power cut), and the power is cut at the end; and, with no EIO, the
power is cut at every commit boundary of a compaction batch.

What delta-rs and pyiceberg write is on the same disk: a Delta version or an Iceberg metadata
file the sink did not sync before acknowledging its batch is lost at the cut (the Delta and
Iceberg kinds; an Iceberg table in a catalog has the catalog beside the disk, as a catalog
service, its pointer as it was at the instant of the cut). Iceberg kinds fail only their own
writes and are cut only around their own step: the rest of their commit is a plain table's.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.errors import DataNotDurableError
from streaming_exactly_once.storage import open_storage
from streaming_exactly_once.testing.faults import (
    BOUNDARIES,
    COMPACTION_ONLY,
    DELTA_ONLY,
    FEATURE_ONLY,
    GROUP_ONLY,
    ICEBERG_ONLY,
    FaultInjectingStorage,
    Rule,
    Where,
)
from streaming_exactly_once.testing.power_cut import PowerCutDisk
from tests.commit.helpers import make_committer, stage_and_commit, visible_rows
from tests.commit.power_cut_runs import Eio, RunResult, TableKind, boundary_cut, run
from tests.delta.helpers import commit_batch

KINDS = [
    TableKind("rename"),
    TableKind("direct"),
    TableKind("rename", delta=True),
    TableKind("direct", delta=True, spark_manifest=False),
    TableKind("direct", compacted=True),
    TableKind("rename", iceberg="path"),
    TableKind("direct", iceberg="catalog"),
]
#: between them they make every named write (a Delta rename table's are a plain one's and the Delta
#: log's; an Iceberg table's other writes are a plain one's, so only its own are failed: ``eio_writes``)
EIO_KINDS = [k for k in KINDS if not (k.delta and k.mode == "rename")]
ANY, RENAME, DIRECT = (lambda k: True), (lambda k: k.mode == "rename"), (lambda k: k.mode == "direct")
PRIVATE, SPARK = (lambda k: not k.spark_manifest), (lambda k: k.spark_manifest)
DELTA = lambda k: k.delta  # noqa: E731
ICEBERG, PATH_ICEBERG, CATALOG = (lambda k: k.iceberg is not None), (lambda k: k.iceberg == "path"), (lambda k: k.iceberg == "catalog")
COMPACTED = lambda k: k.compacted  # noqa: E731
PARQUET = lambda k: k.parquet  # noqa: E731
MANIFEST = r"(_spark_metadata|_seo/manifest)"
TMP = r"\.[0-9a-f]{32}\.tmp$"

#: name -> (file or directory, path pattern, the table kinds whose runs make it)
DURABLE_WRITES = {
    "table identity": ("file", r"^_seo/\.table\.", ANY),
    "epoch": ("file", r"^_seo/epochs/\.", ANY),
    "heartbeat": ("file", r"^_seo/heartbeats/\.", ANY),
    "WAL claim": ("file", r"^_seo/wal/\.", ANY),
    "verdict": ("file", r"^_seo/verdicts/\.", ANY),
    "staged data file synced with the claim": ("file", r"^_seo/staging/[^/]+/data/p=a/part-", RENAME),
    # a compacted direct table's too: the rewrite a claim left pending (the retried batch) moves in
    "moved data file synced by a roll-forward": ("file", r"^p=a/part-", lambda k: k.mode == "rename" or k.compacted),
    "intent": ("file", r"^_seo/staging/[^/]+/intents/\.", DIRECT),
    "data file written in place": ("file", r"^p=a/\.part-", DIRECT),
    "manifest file": ("file", rf"^{MANIFEST}/\.\d+{TMP}", ANY),
    "manifest compact file": ("file", rf"^{MANIFEST}/\.\d+\.compact{TMP}", ANY),
    "manifest compaction work file": ("file", rf"^{MANIFEST}/\.\d+\.compact\.e\d+\.prep$", ANY),
    "manifest file synced by a roll-forward": ("file", rf"^{MANIFEST}/\d+(\.compact)?$", ANY),
    "manifest index": ("file", r"^_seo/manifest-index/\.", ANY),
    **{f"{log} record": ("file", rf"^_seo/{log}/\.\d+{TMP}", ANY) for log in ("commits", "offsets", "sources", "ledger")},
    **{f"{log} compact file": ("file", rf"^_seo/{log}/\.\d+\.compact{TMP}", ANY) for log in ("commits", "offsets")},
    # a run that waits for the background after each batch (compacted) publishes the prepared copy, but a
    # compacted direct table's new writer rolls the pending claim forward before its copy is prepared
    "sources compact file": ("file", r"^_seo/sources/\.\d+\.compact\.[0-9a-f]{32}\.tmp$", lambda k: not k.compacted or k.mode == "direct"),
    **{f"{log} record synced afterwards": ("file", rf"^_seo/{log}/\d+(\.compact)?$", ANY) for log in ("commits", "offsets", "sources", "ledger")},
    "sources compaction work file": ("file", r"^_seo/sources/\.\d+\.compact\.e\d+\.prep$", ANY),
    "Delta commit written (create-if-absent)": ("file", rf"^_delta_log/\.\d{{20}}\.json{TMP}", DELTA),
    "Delta commit synced before the commit record": ("file", r"^_delta_log/\d{20}\.json$", DELTA),
    "Delta checkpoint synced in the background": ("file", r"^_delta_log/(\d{20}\.checkpoint\.parquet|_last_checkpoint)$", DELTA),
    "schema record": ("file", rf"^_seo/schema/\.\d+{TMP}", PARQUET),  # the Parquet helper gives the batch's schema
    # pyiceberg writes through the table's storage, except a catalog's metadata file (its own FileIO)
    "Iceberg manifest": ("file", r"^metadata/[0-9a-f-]+-m\d+\.avro$", ICEBERG),
    "Iceberg manifest list": ("file", r"^metadata/snap-\d+-\d+-[0-9a-f-]+\.avro$", ICEBERG),
    "Iceberg metadata file": ("file", rf"^metadata/\.v\d+\.metadata\.json{TMP}", PATH_ICEBERG),
    "Iceberg metadata file synced by a roll-forward": ("file", r"^metadata/v\d+\.metadata\.json$", PATH_ICEBERG),
    "Iceberg version hint": ("file", rf"^metadata/\.version-hint\.text{TMP}", PATH_ICEBERG),
    "catalog's metadata file synced before the commit record": ("file", r"^metadata/\d{5}-[0-9a-f-]+\.metadata\.json$", CATALOG),
    "Iceberg metadata directory": ("dir", r"^metadata$", ICEBERG),
    "root directory": ("dir", r"^$", ANY),
    "_seo directory": ("dir", r"^_seo$", ANY),
    **{
        f"_seo/{d} directory": ("dir", rf"^_seo/{d}$", ANY)
        for d in ("commits", "epochs", "heartbeats", "manifest-index", "offsets", "sources", "wal", "verdicts", "ledger")
    },
    # the Delta helper makes none first; a rename-mode claim syncs the staged files' directories
    "_seo/staging directory": ("dir", r"^_seo/staging$", ANY),
    "an attempt's staging directory": ("dir", r"^_seo/staging/[^/]+$", ANY),
    "staged data directory": ("dir", r"^_seo/staging/[^/]+/data$", RENAME),
    "staged partition directory": ("dir", r"^_seo/staging/[^/]+/data/p=a$", RENAME),
    "intents directory": ("dir", r"^_seo/staging/[^/]+/intents$", DIRECT),
    "_spark_metadata directory": ("dir", r"^_spark_metadata$", SPARK),
    "_delta_log directory": ("dir", r"^_delta_log$", DELTA),
    "_seo/schema directory": ("dir", r"^_seo/schema$", PARQUET),
    "private manifest directory": ("dir", r"^_seo/manifest$", PRIVATE),
    "partition directory (new names)": ("dir", r"^p=a$", ANY),
    "staged rewrite written": ("file", rf"^_seo/staging/[^/]+-rw[0-9a-f]+-e\d+/rewrite/p=a/\.part-compacted-.*{TMP}", COMPACTED),
    "staged rewrite synced with the claim": ("file", r"^_seo/staging/[^/]+/rewrite/p=a/part-compacted-", COMPACTED),
    "rewrite directory": ("dir", r"^_seo/staging/[^/]+/rewrite$", COMPACTED),
    "rewrite partition directory": ("dir", r"^_seo/staging/[^/]+/rewrite/p=a$", COMPACTED),
    # what a compaction batch's compact file leaves out, recorded before it (manifest.retired)
    "retired-files record": ("file", rf"^_seo/retired/\.\d+{TMP}", COMPACTED),
    "_seo/retired directory": ("dir", r"^_seo/retired$", COMPACTED),
}


def writes_of(kind: TableKind) -> list[str]:
    return [name for name, (_, _, applies) in DURABLE_WRITES.items() if applies(kind)]


def eio_writes(kind: TableKind) -> list[str]:
    """The writes an EIO is injected at: all a kind makes, an Iceberg table's own only."""
    own = (ICEBERG, PATH_ICEBERG, CATALOG)
    return [w for w in writes_of(kind) if kind.iceberg is None or DURABLE_WRITES[w][2] in own]


def boundaries_of(kind: TableKind) -> list[str]:
    if kind.iceberg is not None:  # its own, and around them (the others are a plain table's)
        own = [b for b in ICEBERG_ONLY if kind.iceberg == "path" or b in ("before-iceberg", "after-iceberg")]
        return ["after-manifest", *own, "after-commit"]
    # a schema-changing commit is cut at its own boundary in test_schema_crash (here batch 2 changes none)
    skip = set(GROUP_ONLY) | set(FEATURE_ONLY) | ({"mid-move", "after-move"} if kind.mode == "direct" else {"after-cleanup"})
    if kind.compacted:  # the rewrite's own boundary, and a direct-mode compaction batch moves its new file
        skip -= {*COMPACTION_ONLY, "mid-move", "after-move"}
    if kind.delta:
        skip -= set(DELTA_ONLY)
    if kind.parquet:
        skip |= {"after-intent", "before-stage"}  # the Parquet helper stages without making the directory first
    return [b for b in BOUNDARIES if b not in skip]


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> dict[TableKind, RunResult]:
    """One run per table kind without a fault, its fsyncs and boundaries recorded."""
    return {kind: run(tmp_path_factory.mktemp(kind.name), kind, record=True) for kind in KINDS}


def _named(kind: str, path: str) -> list[str]:
    return [name for name, (k, pattern, _) in DURABLE_WRITES.items() if k == kind and re.search(pattern, path)]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_durable_write_of_the_commit_path_is_named(recordings, kind):
    events = recordings[kind].events
    unnamed = sorted({f"{e.kind} {e.path}" for e in events if not _named(e.kind, e.path)})
    assert not unnamed, f"durable writes of a {kind.name} table that no test fails: {unnamed}"
    made = {name for e in events for name in _named(e.kind, e.path)}
    assert made == set(writes_of(kind)), f"named but not made: {set(writes_of(kind)) - made}; made but not listed: {made - set(writes_of(kind))}"


def _eio(recording: RunResult, name: str) -> Eio:
    """The named write's first fsync from batch 1 on (the first at all if batch 0 had the only one)."""
    kind, pattern, _ = DURABLE_WRITES[name]
    matching = [i for i, e in enumerate(recording.events) if e.kind == kind and re.search(pattern, e.path)]
    later = [i for i in matching if i >= recording.batch_starts[1]]
    chosen = later[0] if later else matching[0]
    return Eio(pattern, kind=kind, nth=matching.index(chosen) + 1)


def _say(result: RunResult) -> str:
    return "\n".join(result.problems) + f"\n(power cut: {result.cut})"


@pytest.mark.parametrize("kind,write", [(k, w) for k in EIO_KINDS for w in eio_writes(k)], ids=lambda x: x.name if isinstance(x, TableKind) else x)
def test_an_eio_at_a_durable_write_then_a_power_cut_loses_no_acknowledged_batch(recordings, tmp_path, kind, write):
    result = run(tmp_path / "t", kind, _eio(recordings[kind], write))
    assert result.injected, f"the EIO at the {write} never happened"
    assert not result.problems, _say(result)


@pytest.mark.parametrize("kind,boundary", [(k, b) for k in KINDS for b in boundaries_of(k)], ids=lambda x: x.name if isinstance(x, TableKind) else x)
def test_a_power_cut_at_a_commit_boundary_loses_no_acknowledged_batch(recordings, tmp_path, kind, boundary):
    """In compaction batch 2 (its compact files, the preparation's publish), or - for a
    boundary the janitor reaches in the background - at its first firing from there on."""
    batch = 2
    cut = boundary_cut(recordings[kind].firings, boundary, batch)
    assert cut is not None, f"a {kind.name} run never reaches {boundary} in batch {batch}"
    result = run(tmp_path / "t", kind, cut)
    assert result.injected, f"the run never reached {cut.spec}"
    assert not result.problems, _say(result)


# -- the failed fsyncs and the resurrected intents, each case alone --------------------------------


def _third_batchs_staged_fsync_fails(root, commit, match: str | None = None) -> None:
    """Rename mode: batches 0-2 of ten rows each, the third's staged-file fsync failing once; it
    must fail before its claim (nothing in the WAL), Spark's retry then commits it; a power cut,
    and a restart that rolls nothing wrong forward."""
    with PowerCutDisk(root) as disk:
        committer = make_committer(open_storage(str(root)))
        for b in range(3):
            ids = list(range(b * 10, b * 10 + 10))
            if b == 2:
                disk.fail_fsync(r"^_seo/staging/[^/]+/data/p=a/part-")
                with pytest.raises(DataNotDurableError, match=match):
                    commit(committer, b, ids)
                assert not (root / "_seo" / "wal" / "2").exists()  # nothing claimed
            commit(committer, b, ids)
        committer.close()
        assert disk.failed, "the staged file's fsync never failed"
        disk.power_cut()
    restarted = make_committer(open_storage(str(root)))
    restarted.open()
    restarted.close()


def test_a_staged_file_whose_fsync_failed_is_not_published_on_a_second_fsync(tmp_path):
    """The fsync of a staged file (Spark wrote it, unsynced) fails before the claim; the commit
    must not publish that inode after a second, successful fsync - its pages were marked clean,
    its bytes are lost at the power cut. Spark's retry writes new files."""
    root = tmp_path / "t"
    _third_batchs_staged_fsync_fails(root, lambda c, b, ids: stage_and_commit(c, "q", b, ids, mode="rename", spark_staging=True))
    assert visible_rows(open_storage(str(root))) == list(range(30))


def test_a_staged_file_whose_fsync_failed_as_the_writer_read_it_is_not_published(tmp_path):
    """With Parquet the sink's writer reads each staged file's footer in the open that syncs its
    bytes, and the commit does not sync them again. That fsync fails: the files it synced for the
    batches before hold their rows after a power cut."""
    import pyarrow.parquet as pq

    from streaming_exactly_once.manifest.manifest_log import ManifestLog
    from tests.delta.helpers import commit_batch

    root = tmp_path / "t"
    as_sink = lambda c, b, ids: commit_batch(c, "q", b, ids, spark_staging=True, read_as_sink=True)  # noqa: E731
    _third_batchs_staged_fsync_fails(root, as_sink, match="Reading and syncing staged file")
    files = [e.uri.removeprefix("file://") for e in ManifestLog(open_storage(str(root))).files()]
    rows = sorted(i for f in files for i in pq.read_table(f).column("id").to_pylist())
    assert rows == list(range(30))


def test_a_compaction_work_file_whose_fsync_failed_is_not_published(tmp_path):
    """The background preparation of ``9.compact``: its work file's fsync fails. The compaction
    batch must not publish that inode after a second fsync: the table would not open after a
    power cut (every reader needs the compact file)."""
    root = tmp_path / "t"
    with PowerCutDisk(root) as disk:
        disk.fail_fsync(r"^_spark_metadata/\.9\.compact\..*\.prep$")
        committer = make_committer(open_storage(str(root)), cleanup_delay_ms=0, min_batches_to_retain=1)
        for b in range(13):
            stage_and_commit(committer, "q", b, list(range(b * 10, b * 10 + 10)), mode="direct")
            committer.janitor.drain()  # the preparation keeps up with every batch
        committer.close()
        assert disk.failed, "the work file's fsync never failed"
        disk.power_cut()
    restarted = make_committer(open_storage(str(root)))
    restarted.open()
    restarted.close()
    assert visible_rows(open_storage(str(root))) == list(range(130))


def test_a_power_cut_never_resurrects_a_published_batchs_intents_without_its_claim(tmp_path):
    """Direct mode: batch 1's claim and its staging (its intents) are deleted, neither synced.
    Batch 2 then syncs the directories both live in - the staging one while batch 1's staging
    is still there, the WAL one after batch 1's claim is gone - and the power is cut. The
    intents come back, the claim does not: recovery must not take them for an abandoned
    attempt and delete the data files of a published batch."""
    root = tmp_path / "t"
    later = threading.Event()
    image = []
    with PowerCutDisk(root) as disk:
        storage = FaultInjectingStorage(open_storage(str(root)))
        committer = make_committer(storage, cleanup_delay_ms=0)
        commit_batch(committer, "q", 0, list(range(10)), mode="direct")
        committer.janitor.drain()
        storage.arm(
            [
                Rule(Where(("delete_tree",), r"^_seo/staging/1-[^/]+$", "before"), "call", callback=lambda: later.wait(10)),
                Rule(Where(("put_if_absent",), r"^_seo/wal/2$", "after"), "call", callback=lambda: (image.append(disk.image()), later.set())),
            ]
        )
        commit_batch(committer, "q", 1, list(range(10, 20)), mode="direct")
        # the claim goes in the background (its records' sync first): batch 2's claim must come
        # after it, as on an idle machine, or the claim is in the image too and simply rolled forward
        deadline = time.time() + 30
        while (root / "_seo" / "wal" / "1").exists() and time.time() < deadline:
            time.sleep(0.01)
        assert not (root / "_seo" / "wal" / "1").exists()
        commit_batch(committer, "q", 2, list(range(20, 30)), mode="direct")
        committer.close()
        disk.power_cut(image[0])
    restarted = make_committer(open_storage(str(root)))
    restarted.lease.clock = lambda: time.time() + 3600  # the machine was down: the old lease has expired
    report = restarted.open()
    restarted.close()
    assert report.deleted_data_files == 0, report
    # batch 2's claim survived the cut with its data: rolled forward, as any claim of the next batch
    assert report.rolled_forward == [2], report
    assert Counter(read.arrow(str(root), columns=["id"]).column("id").to_pylist()) == Counter(range(30))


def test_retentions_deletes_that_come_back_in_part_after_a_power_cut_leave_the_table_open(tmp_path):
    """Retention deletes a log's files below a compact file, and nothing syncs their directory
    before the power cut. Strict POSIX promises no order for the names that then come back: here
    the lowest of each log comes back and the next one does not. Those files are below the
    latest compact file, which no reader looks past: the table must open, read every row once,
    and the next retention pass must delete them again."""
    root = tmp_path / "t"
    with PowerCutDisk(root) as disk:
        committer = make_committer(open_storage(str(root)), cleanup_delay_ms=0, min_batches_to_retain=1, compact_interval=3)
        for b in range(6):
            stage_and_commit(committer, "q", b, list(range(b * 10, b * 10 + 10)), mode="direct")
            committer.janitor.drain()
        committer.close()
        report = disk.power_cut()
    logs = ("_spark_metadata", "_seo/commits", "_seo/offsets", "_seo/sources")
    assert {f"{log_dir}/{b}" for log_dir in logs for b in (0, 1)} <= set(report.reappeared), report
    for log_dir in logs:  # as if the delete of file 1 had reached the disk and that of file 0 not
        (root / log_dir / "1").unlink()
    restarted = make_committer(open_storage(str(root)), cleanup_delay_ms=0, min_batches_to_retain=1, compact_interval=3)
    restarted.open()
    stage_and_commit(restarted, "q", 6, list(range(60, 70)), mode="direct")
    restarted.janitor.drain()
    restarted.close()
    assert Counter(visible_rows(open_storage(str(root)))) == Counter(range(70))
    assert [log_dir for log_dir in logs if (root / log_dir / "0").exists()] == []
