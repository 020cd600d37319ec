"""Drive the commit protocol without Spark: stage small files by hand, like the sink would."""

from __future__ import annotations

from streaming_exactly_once.checkpoint.reader import InputFile
from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile, TableCommitter
from streaming_exactly_once.testing.faults import with_faults


def make_committer(storage, *, fail_at=None, heartbeat=False, timeout_ms=60_000, **opts) -> TableCommitter:
    options = CommitterOptions(heartbeat=heartbeat, lease_timeout_ms=timeout_ms, **opts)
    return TableCommitter(with_faults(storage, fail_at=fail_at) if fail_at else storage, options)


def stage_file(storage, attempt, final: str, payload: bytes, *, spark_staging: bool = False) -> StagedFile:
    """One data file of ``attempt`` as the sink stages it: in rename mode under the attempt's
    staging directory, in direct mode an intent first, then the file under its final name.
    ``spark_staging``: rename mode's file is written as Spark's writers write it, without an
    fsync (the commit syncs it); direct mode's are the library's own, synced when closed."""
    if attempt.mode == "rename":
        staged = f"{attempt.staging_dir}/data/{final}"
        (storage.without_sync() if spark_staging else storage).put_if_absent(staged, payload)
    else:
        storage.put_if_absent(f"{attempt.staging_dir}/intents/{final.rsplit('/', 1)[-1]}", final.encode())
        storage.put_if_absent(final, payload)
        staged = None
    info = storage.info(staged or final)
    return StagedFile(final=final, size=info.size, mtime_ms=info.mtime_ms, staged=staged)


def stage_and_commit(
    committer: TableCommitter, query_id: str, spark_batch: int, rows: list[int], *, mode="rename", partition="p=a", spark_staging=False
):
    """One batch: a data file whose bytes are its row ids, one input file per batch."""
    committer.ensure_open()
    if committer.is_committed(query_id, spark_batch):
        return None
    try:
        with committer.batch(query_id, spark_batch, mode=mode) as attempt:  # aborted if the block raises
            committer.storage.makedirs(attempt.staging_dir)  # as the sink does before its writer runs
            files = []
            halves = [rows[: len(rows) // 2], rows[len(rows) // 2 :]]  # two files: "mid-move" exists
            for part, chunk in enumerate(halves):
                name = f"part-{part}-{query_id[:4]}-{spark_batch:05d}-{attempt.attempt}.txt"
                payload = ",".join(map(str, chunk)).encode()
                files.append(stage_file(committer.storage, attempt, f"{partition}/{name}", payload, spark_staging=spark_staging))
            inputs = [InputFile(source=0, path=f"file:///in/{query_id[:4]}-{spark_batch}.csv", timestamp=1)]
            return committer.commit(attempt, files, input_files=inputs, num_rows=len(rows))
    except BaseException:
        committer.invalidate()
        raise


def visible_rows(storage) -> list[int]:
    """Rows of every file the manifest lists (what any manifest reader sees)."""
    from streaming_exactly_once.manifest.manifest_log import ManifestLog
    from streaming_exactly_once.manifest.paths import normalize_uri

    root = normalize_uri(storage.root_uri) + "/"
    rows: list[int] = []
    for entry in ManifestLog(storage).files():
        rel = normalize_uri(entry.uri)[len(root) :]
        data = storage.read_bytes(rel).decode()
        rows += [int(x) for x in data.split(",") if x]
    return sorted(rows)
