"""``seo recover``, ``seo gc`` and ``seo compact``: the commands that change a stopped table under
its lease (``maintenance``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..config import parse_duration_ms, parse_size
from . import progress
from .context import CliContext, json_option, printer_for
from .json_keys import camel_keys
from .printer import human_bytes

if TYPE_CHECKING:
    from ..maintenance.held import HeldFiles


@click.command()
@click.argument("table")
@click.option("--discard-wal", type=int, default=None, metavar="BATCH", help="Drop an unpublished (e.g. corrupt) WAL entry.")
@click.option("--rebuild-logs", is_flag=True, help="Rebuild missing offsets/commits/sources records.")
@click.option(
    "--accept-int96",
    is_flag=True,
    help="Let a pending Iceberg commit name its INT96 timestamp files as they are (a batch an earlier release published).",
)
@click.option("--lease-timeout", default="60s", show_default=True)
@json_option
@click.pass_obj
def recover(
    ctx: CliContext, table: str, discard_wal: int | None, rebuild_logs: bool, accept_int96: bool, lease_timeout: str, local_json: bool
) -> None:
    """Roll pending commits forward and remove aborted attempts, without running a query."""
    from ..maintenance import repair

    out = printer_for(ctx, local_json)
    storage = ctx.storage(table)
    timeout = parse_duration_ms(lease_timeout, key="--lease-timeout")
    result: dict[str, Any] = {}
    if discard_wal is not None:
        result["discardWal"] = repair.discard_wal(storage, discard_wal, lease_timeout_ms=timeout)
    if rebuild_logs:
        rebuilt = repair.rebuild_logs(storage, lease_timeout_ms=timeout)
        result["rebuilt"] = camel_keys(rebuilt.__dict__)
    report = repair.recover_table(storage, lease_timeout_ms=timeout, accept_int96=accept_int96)
    result["recovery"] = camel_keys(report.__dict__)
    if out.as_json:
        return out.json(result)
    if "discardWal" in result:
        out.write(result["discardWal"])
    if rebuild_logs:
        r = result["rebuilt"]
        out.write(f"rebuilt offsets {r['offsets'] or '-'}, commits {r['commits'] or '-'}, sources {r['sources'] or '-'}")
        if r["unprotectedBatches"]:
            out.write(f"warning: input files of batches {r['unprotectedBatches']} are unknown; a recreated checkpoint could re-read them")
        if r["offsetsUnknown"]:
            out.write(
                f"warning: the source offsets of batches {r['offsetsUnknown']} are lost with their records (and their "
                "Spark checkpoint); restart the query from its checkpoint, or start a new one from offsets past them"
            )
    out.block(
        [
            ("latest batch", report.latest_batch_id),
            ("rolled forward", report.rolled_forward or "none"),
            ("discarded claims", report.discarded or "none"),
            ("aborted attempts", report.aborted_attempts or "none"),
            ("deleted data files", report.deleted_data_files),
            ("removed temp files", len(report.removed_temp_files)),
        ]
    )


@click.command()
@click.argument("table")
@click.option("--dry-run", is_flag=True, help="List what would be deleted; read-only, runs beside a live writer.")
@click.option("--older-than", default="1h", show_default=True, help="Only files older than this (protects in-flight batches).")
@click.option("--lease-timeout", default="60s", show_default=True, help="How long gc's own lease lasts without a heartbeat.")
@click.option(
    "--min-batches-to-retain",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="The stream's min_batches_to_retain: when the files kept for time travel become collectable.",
)
@json_option
@click.pass_obj
def gc(ctx: CliContext, table: str, dry_run: bool, older_than: str, lease_timeout: str, min_batches_to_retain: int, local_json: bool) -> None:
    """Delete orphan data files and stale staging that no retained manifest entry references, and
    temp files killed writers left. Only files the table's records show this sink wrote are
    deleted; a foreign file (another tool's) is listed and kept.

    Takes the table's lease (a dataset group's, for a group or one of its tables): stop the
    query first. A dry run takes no lease. On a group root every table of the group is collected.
    """
    from ..maintenance.gc import collect_garbage

    out = printer_for(ctx, local_json)
    with progress.activity("gc", show=progress.wanted(out.as_json)) as tell:
        tell("listing the table and its logs")
        report = collect_garbage(
            ctx.storage(table),
            older_than_ms=parse_duration_ms(older_than, key="--older-than"),
            dry_run=dry_run,
            lease_timeout_ms=parse_duration_ms(lease_timeout, key="--lease-timeout"),
            min_batches_to_retain=min_batches_to_retain,
        )
    if out.as_json:
        return out.json(
            {
                "dryRun": dry_run,
                "writerLive": report.writer_live,
                "tables": report.tables,
                "orphans": [{"uri": u, "size": s} for u, s in report.orphans],
                "foreign": [{"uri": u, "size": s} for u, s in report.foreign],
                "staging": report.staging,
                "tempFiles": [{"uri": u, "size": s} for u, s in report.temp_files],
                "youngSkipped": report.young_skipped,
                "pendingCommits": report.pending_batches,
                "held": [_held_json(group) for group in report.held],
            }
        )
    verb = "would delete" if dry_run else "deleted"
    if report.writer_live:
        out.write("a writer is live: this is what gc would delete now (gc itself waits until the writer stops)")
    for uri, size in report.orphans:
        out.write(f"{verb} {uri} ({human_bytes(size)})")
    for uri in report.staging:
        out.write(f"{verb} staging {uri}")
    for uri, size in report.temp_files:
        out.write(f"{verb} temp file {uri} ({human_bytes(size)})")
    for group in report.held:
        out.write(_held_text(group, min_batches_to_retain))
    if report.pending_batches:
        out.write(f"kept every file of pending commit(s) {', '.join(map(str, report.pending_batches))}; `seo recover` completes them")
    for uri, size in report.foreign[:10]:
        out.write(f"kept foreign file {uri} ({human_bytes(size)})")
    if report.foreign:
        more = f" ({len(report.foreign) - 10} more: --json lists them all)" if len(report.foreign) > 10 else ""
        out.write(
            f"kept {len(report.foreign)} foreign file(s){more}: no record shows this sink wrote them, and no reader of the table "
            "sees their rows. Move them out of the table if they are another job's, or delete them yourself if they are garbage"
        )
    for uri in report.unreadable_records:
        out.write(f"could not read retired-files record {uri}: its files were kept")
    tables = f" in {len(report.tables)} tables" if len(report.tables) > 1 else ""
    out.write(
        f"{verb} {len(report.orphans)} orphan files ({human_bytes(report.bytes)}){tables}, {len(report.staging)} staging dirs "
        f"and {len(report.temp_files)} temp files; "
        f"{report.young_skipped} younger than {older_than} kept"
    )


def _held_json(group: HeldFiles) -> dict[str, Any]:
    return {
        "reason": group.reason,
        "files": [{"uri": u, "size": s} for u, s in group.files],
        "bytes": group.bytes,
        "newestBatch": group.newest_batch,
        "collectableAfterBatch": group.collectable_after_batch,
    }


def _held_text(group: HeldFiles, min_batches_to_retain: int) -> str:
    """Two lines: how many files are kept and why; when they become collectable."""
    what = f"kept {len(group.files)} replaced file(s) ({human_bytes(group.bytes)})"
    if group.reason == "delta":
        return f"{what} that Delta versions still name:\n  collectable once Delta's log retention (delta_log_retention) drops them"
    if group.reason == "iceberg":
        return f"{what} that Iceberg snapshots still name:\n  collectable once those snapshots expire"
    return (
        f"{what} for time travel: as_of {group.newest_batch} and earlier reads them\n"
        f"  collectable after batch {group.collectable_after_batch} "
        f"(min_batches_to_retain {min_batches_to_retain}), cleanup_delay and --older-than later"
    )


@click.command()
@click.argument("table")
@click.option("--dry-run", is_flag=True, help="List what would be rewritten; read-only, takes no lease.")
@click.option("--target-size", default="128MB", show_default=True, help="Size of a new file.")
@click.option("--min-files", type=int, default=8, show_default=True, help="Fewest small files of a partition worth a rewrite.")
@click.option("--min-age", default="8 days", show_default=True, help="Only files written at least this long ago (downstream file-source queries).")
@click.option("--max-bytes", default=None, help="Most bytes rewritten by this run (a dataset group's: in each table; default: no limit).")
@click.option("--quiet-period", default="0s", show_default=True, help="Leave alone a partition that received a file this recently.")
@click.option("--retention", default=None, help="The stream's retention, if it sets one: files it is about to drop are not rewritten.")
@click.option(
    "--consumer",
    "consumers",
    multiple=True,
    metavar="CHECKPOINT",
    help="A downstream file-source query's checkpoint location: only files it has read, below its horizon, are rewritten. Repeatable.",
)
@click.option("--consumer-max-file-age", default="7 days", show_default=True, help="The consumers' maxFileAge (Spark's default).")
@click.option("--lease-timeout", default="60s", show_default=True)
@json_option
@click.pass_obj
def compact(
    ctx: CliContext,
    table: str,
    dry_run: bool,
    target_size: str,
    min_files: int,
    min_age: str,
    max_bytes: str | None,
    quiet_period: str,
    retention: str | None,
    consumers: tuple[str, ...],
    consumer_max_file_age: str,
    lease_timeout: str,
    local_json: bool,
) -> None:
    """Rewrite small files of a stopped table into files near --target-size, published by the
    table's next compaction batch (committed now, with empty batches before it if needed).

    Takes the table's lease: stop the query first. Parquet, Delta and Iceberg tables (a catalog's
    through pyiceberg's configuration of it). A dataset group's root compacts each of its tables,
    one of its tables only that one, in group batches under the group's lease.
    """
    from ..commit.rewrites.compaction_consumers import Consumer
    from ..commit.rewrites.data_compaction import CompactionPolicy
    from ..maintenance.compact import compact_table

    out = printer_for(ctx, local_json)
    target = parse_size(target_size, key="--target-size")
    policy = CompactionPolicy(
        target_size=target,
        min_files=min_files,
        min_age_ms=parse_duration_ms(min_age, key="--min-age"),
        max_bytes=parse_size(max_bytes, key="--max-bytes") if max_bytes is not None else 1 << 62,
        quiet_period_ms=parse_duration_ms(quiet_period, key="--quiet-period"),
        consumers=tuple(Consumer(path, parse_duration_ms(consumer_max_file_age, key="--consumer-max-file-age")) for path in consumers),
    )
    report = compact_table(
        ctx.storage(table),
        policy,
        dry_run=dry_run,
        retention_ms=parse_duration_ms(retention, key="--retention") if retention is not None else None,
        lease_timeout_ms=parse_duration_ms(lease_timeout, key="--lease-timeout"),
    )
    result: dict[str, Any] = {
        "dryRun": report.dry_run,
        "rewrites": [{"directory": r.directory, "files": r.files, "bytes": r.bytes} for r in report.rewrites],
        "batches": report.batches if not dry_run else report.would_commit,
        "filesBefore": report.files_before,
        "filesAfter": report.files_after,
        "blockedBy": report.blocked_by,
        "whyNothing": report.why_nothing if not report.rewrites else None,
        **({"group": True, "tableBatches": report.table_batches} if report.group else {}),
    }
    if out.as_json:
        return out.json(result)
    verb = "would rewrite" if dry_run else "rewrote"
    for r in report.rewrites:
        out.write(f"{verb} {len(r.files)} files of {r.directory or '(the root)'} ({human_bytes(r.bytes)}) into one")
    if not report.rewrites:
        out.write(f"nothing to compact: {report.why_nothing or report.blocked_by or 'no partition has enough small files old enough'}")
        return None
    batches = result["batches"]
    published = "would publish them in" if dry_run else "published them in"
    kind = "group batch" if report.group else "batch"
    out.write(f"{published} {kind} {batches[-1]}" + (f" (after empty {kind}es {batches[0]}-{batches[-2]})" if len(batches) > 1 else ""))
    for table, own in sorted(report.table_batches.items()):
        out.write(f"  {table}: its batch {own[-1]}" + (f" (after empty batches {own[0]}-{own[-2]})" if len(own) > 1 else ""))
    out.write(f"live files: {report.files_before} -> {report.files_after}")
    return None
