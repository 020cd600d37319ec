"""``seo``: inspect, verify, repair and run exactly-once tables from the shell.

Every command takes ``--json``: one document, keys in camelCase (``json_keys``; a JSON schema per
command in the docs). Errors are one line on stderr and a non-zero exit code
(1 = the command failed; 2 = bad usage; ``verify`` exits 3 when it found only warnings;
130 = interrupted). That holds for *any* error, the library's own and unexpected ones alike:
``--debug`` (or ``SEO_DEBUG=1``) prints the traceback as well.
Only ``run`` starts Spark; the other commands need neither pyspark nor a JVM.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..config import parse_duration_ms
from ..errors import ExactlyOnceError
from . import progress
from .format_output import format_text, table_format_lines
from .json_keys import camel_keys
from .printer import Printer, human_bytes, human_time

if TYPE_CHECKING:
    from ..log.batch_log import BatchLog
    from ..storage.base import Storage

#: The package's version (its ``__init__`` is imported whenever this module is; read from there
#: instead of importing it, which would pull in the sink's modules for the import contracts).
VERSION = str(getattr(sys.modules.get(__name__.split(".")[0]), "__version__", "unknown"))

CommandFunction = TypeVar("CommandFunction", bound=Callable[..., Any])

EXIT_FAILED = 1
EXIT_WARNINGS = 3


class CliContext:
    """What every command gets from the group's options: where to print, storage options."""

    def __init__(self, as_json: bool, storage_options: dict[str, Any]) -> None:
        self.out = Printer(as_json)
        self.as_json = as_json
        self.storage_options = storage_options

    def storage(self, table: str) -> Storage:
        from ..readers.table_location import locate

        return locate(table, self.storage_options, allow_group=True).storage


def _storage_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, value in os.environ.items():  # SEO_STORAGE__ENDPOINT_URL=... (secrets from the environment)
        if key.startswith("SEO_STORAGE__"):
            options[key[len("SEO_STORAGE__") :].lower()] = value
    for pair in pairs:
        if "=" not in pair:
            raise click.BadParameter(f"expected key=value, got {pair!r}", param_hint="--storage-option")
        key, value = pair.split("=", 1)
        options[key] = value
    return options


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, "-V", "--version", prog_name="seo", message="%(prog)s (streaming-exactly-once) %(version)s")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
@click.option(
    "-o",
    "--storage-option",
    "storage_option",
    multiple=True,
    metavar="KEY=VALUE",
    help="Storage option (e.g. endpoint_url=...); also SEO_STORAGE__KEY env vars.",
)
@click.option("--debug", is_flag=True, help="On an error, print the Python traceback too (also SEO_DEBUG=1).")
@click.pass_context
def cli(ctx: click.Context, as_json: bool, storage_option: tuple[str, ...], debug: bool) -> None:
    """Exactly-once tables for Spark Structured Streaming."""
    ctx.obj = CliContext(as_json, _storage_options(storage_option))


def _json_option(f: CommandFunction) -> CommandFunction:
    """Allow ``--json`` after the subcommand too (``seo status T --json``)."""
    return click.option("--json", "local_json", is_flag=True, help="Print JSON.")(f)


def _out(ctx: CliContext, local_json: bool) -> Printer:
    if local_json:
        ctx.out.as_json = True
    return ctx.out


@cli.command()
@click.argument("table")
@_json_option
@click.pass_obj
def status(ctx: CliContext, table: str, local_json: bool) -> None:
    """Latest batch, writer and epoch, pending commits, files, bytes, rows, watermarks."""
    from ..maintenance.status import table_status

    out = _out(ctx, local_json)
    with progress.activity("status", show=progress.wanted(out.as_json)):
        info = table_status(ctx.storage(table))
    if out.as_json:
        return out.json(info)
    if "group" in info and "tables" in info:
        return _group_status(out, info)
    lease = info.get("lease") or {}
    travel = info.get("timeTravel") or {}
    out.block(
        [
            ("table", info["table"]),
            ("latest batch", info["latestBatchId"]),
            *table_format_lines(info),
            *([("manifest", f"{info['manifest']} (not read by Spark's file source)")] if "manifest" in info else []),
            ("files", info.get("files")),
            ("bytes", human_bytes(info.get("bytes"))),
            ("rows", info.get("rows")),
            ("format", format_text(info)),
            ("partitioned by", ", ".join(info.get("partitionBy") or []) or "-"),
            ("last commit", human_time(info.get("lastCommitMs"))),
            ("time travel", f"batches {travel['oldest']}..{travel['latest']}" if travel else "-"),
            (
                "writer",
                f"epoch {lease['epoch']}, {'LIVE' if lease['alive'] else 'not running'} ({lease['state']}), pid {lease['pid']} on {lease['host']}"
                if lease
                else "none yet",
            ),
            ("pending commits", ", ".join(map(str, info["pendingCommits"])) or "none"),
            ("staging dirs", info["stagingDirs"]),
            *_schema_lines(info),
        ]
    )
    queries = info.get("queries") or []
    if queries:
        out.write()
        out.table(
            [(q["queryId"], q["lastSparkBatchId"], q["lastBatchId"], human_time(q["commitTimeMs"]), q["watermarks"]) for q in queries],
            ["query id", "last spark batch", "table batch", "committed", "watermarks"],
        )
    offsets = info.get("sourceOffsets") or {}
    if offsets:
        out.write()
        out.table(sorted(offsets.items()), ["source partition", "committed up to (startingOffsets)"])


def _schema_lines(info: dict[str, Any]) -> list[tuple[str, Any]]:
    """``seo status``: the table schema and its changes (``maintenance.status.schema_status``)."""
    if "schemaError" in info:
        return [("schema", f"ERROR: {info['schemaError']}")]
    schema = info.get("schema")
    if schema is None:
        return [("schema", "none recorded (the next writer records it)")] if "schema" in info else []
    columns = ", ".join(f"{c['name']} {c['type']}" for c in schema["columns"])
    changes = "; ".join(
        f"batch {h['batchId']} {h['reason']}" + (f": {', '.join(h['changes'])}" if h["changes"] else "") for h in info["schemaHistory"]
    )
    return [("schema", f"{columns} (since batch {schema['batchId']})"), ("schema history", changes)]


def _lease_text(info: dict[str, Any]) -> str:
    lease = info.get("lease") or {}
    if not lease:
        return "none yet"
    return f"epoch {lease['epoch']}, {'LIVE' if lease['alive'] else 'not running'} ({lease['state']}), pid {lease['pid']} on {lease['host']}"


def _watermark_text(marks: dict[str, Any]) -> str:
    return ", ".join(f"{c} {m.get('low')}..{m.get('high')}" for c, m in sorted(marks.items())) or "-"


def _group_status(out: Printer, info: dict[str, Any]) -> None:
    out.block(
        [
            ("dataset group", info["group"]),
            ("latest batch", info["latestBatchId"]),
            ("rows", info.get("rows")),
            ("tables", len(info["tables"])),
            ("last commit", human_time(info.get("lastCommitMs"))),
            ("writer", _lease_text(info)),
            ("pending commits", ", ".join(map(str, info["pendingCommits"])) or "none"),
            ("staging dirs", info["stagingDirs"]),
            ("rejected batches", info["rejectedBatches"]),
        ]
    )
    rows = []
    for name, e in sorted(info["tables"].items()):
        failed = [c["name"] for c in e.get("checks", []) if not c.get("passed")]
        rows.append(
            (
                name,
                e.get("status"),
                e.get("batchId", "-"),
                e.get("lastGroupBatch"),
                e.get("rows", 0),
                e.get("quarantinedRows", 0) + e.get("rejectedRows", 0),
                _watermark_text(e.get("watermarks", {})),
                ", ".join(failed) or "-",
            )
        )
    if rows:
        out.write()
        out.table(rows, ["table", "status", "table batch", "group batch", "rows", "set aside", "watermarks (low..high)", "failed checks"])
    for source, parts in sorted(info.get("sourcePartitions", {}).items()):
        out.write()
        out.table([(p, v.get("low"), v.get("high")) for p, v in sorted(parts.items())], [f"source {source} partition", "low", "high"])


@cli.command()
@click.argument("table")
@click.option("--kind", type=click.Choice(["manifest", "offsets", "commits", "sources"]), default="manifest", show_default=True)
@click.option("--batch", type=int, default=None, help="Show the records of one batch file.")
@_json_option
@click.pass_obj
def log(ctx: CliContext, table: str, kind: str, batch: int | None, local_json: bool) -> None:
    """List a log's batches (with commit info), or the records of one batch."""
    from ..table.identity import read_identity
    from ..table.table_logs import TableLogs
    from .log_output import print_batch_records, print_group_batches, print_table_history

    out = _out(ctx, local_json)
    storage = ctx.storage(table)
    identity = read_identity(storage)
    logs = TableLogs.for_identity(storage, identity)
    log_: BatchLog[Any] | None = {"manifest": logs.manifest, "offsets": logs.offsets, "commits": logs.commits, "sources": logs.sources}[kind]
    if log_ is None:
        raise click.UsageError(
            f"{storage.root_uri} has no {kind} log: a dataset group's root keeps offsets, commits and sources; "
            "each of its tables keeps a manifest and commits."
        )
    if batch is not None:
        print_batch_records(out, log_, kind, batch)
    elif kind == "manifest":
        print_table_history(out, storage.root_uri, ctx.storage_options)
    elif kind == "commits" and identity is not None and identity.kind == "group":
        print_group_batches(out, logs.commits)
    else:
        files = log_.list_batch_files()
        if out.as_json:
            out.json([{"batch": b, "file": storage.uri(f"{log_.directory}/{name}")} for b, name in sorted(files.items())])
        else:
            out.table([(b, name) for b, name in sorted(files.items())], ["batch", "file"])


@cli.command()
@click.argument("table")
@click.option("--as-of", type=int, default=None, help="The table as it was after this batch.")
@click.option("--no-verify", is_flag=True, help="Do not check that the files exist, with their size and inside the table.")
@_json_option
@click.pass_obj
def files(ctx: CliContext, table: str, as_of: int | None, no_verify: bool, local_json: bool) -> None:
    """The committed data files (what every reader sees), checked like a reader checks them."""
    from ..readers.visibility import committed_files

    out = _out(ctx, local_json)
    with progress.activity("files", show=progress.wanted(out.as_json)) as tell:
        tell("reading the manifest and checking every file" if not no_verify else "reading the manifest")
        result = committed_files(table, as_of=as_of, storage_options=ctx.storage_options, verify=not no_verify)
    rows = list(zip(result.uris(), result.sizes, strict=True))
    if out.as_json:
        return out.json({"asOf": result.as_of, "files": [{"uri": u, "size": s} for u, s in rows]})
    out.table([(u, human_bytes(s)) for u, s in rows], ["file", "size"])
    out.write(f"{len(rows)} files, {human_bytes(result.total_bytes)}, as of batch {result.as_of}")


@cli.command()
@click.argument("table")
@click.option("--no-orphans", is_flag=True, help="Skip the (full-listing) orphan scan.")
@click.option("--all", "show_all", is_flag=True, help="List every problem, not the first few of each kind.")
@click.option("--examples", type=int, default=5, show_default=True, help="Problems listed per kind (without --all).")
@click.option("--no-schemas", is_flag=True, help="Skip reading each committed Parquet file's schema (one read per file).")
@_json_option
@click.pass_obj
def verify(ctx: CliContext, table: str, no_orphans: bool, show_all: bool, examples: int, no_schemas: bool, local_json: bool) -> None:
    """Check the manifest and logs against storage. Exit 0 clean, 1 errors, 3 warnings only."""
    from ..maintenance.verify import verify_table
    from .verify_output import print_report

    out = _out(ctx, local_json)
    with progress.activity("verify", show=progress.wanted(out.as_json)) as tell:
        report = verify_table(ctx.storage(table), check_orphans=not no_orphans, progress=tell, check_schemas=not no_schemas)
    if out.as_json:
        out.json(report.to_json())
    else:
        print_report(out, report, limit=None if show_all else examples)
    if report.errors:
        sys.exit(EXIT_FAILED)
    if report.warnings:
        sys.exit(EXIT_WARNINGS)


@cli.command()
@click.argument("table")
@click.option("--discard-wal", type=int, default=None, metavar="BATCH", help="Drop an unpublished (e.g. corrupt) WAL entry.")
@click.option("--rebuild-logs", is_flag=True, help="Rebuild missing offsets/commits/sources records.")
@click.option("--lease-timeout", default="60s", show_default=True)
@_json_option
@click.pass_obj
def recover(ctx: CliContext, table: str, discard_wal: int | None, rebuild_logs: bool, lease_timeout: str, local_json: bool) -> None:
    """Roll pending commits forward and remove aborted attempts, without running a query."""
    from ..maintenance import repair

    out = _out(ctx, local_json)
    storage = ctx.storage(table)
    timeout = parse_duration_ms(lease_timeout, key="--lease-timeout")
    result: dict[str, Any] = {}
    if discard_wal is not None:
        result["discardWal"] = repair.discard_wal(storage, discard_wal, lease_timeout_ms=timeout)
    if rebuild_logs:
        rebuilt = repair.rebuild_logs(storage, lease_timeout_ms=timeout)
        result["rebuilt"] = camel_keys(rebuilt.__dict__)
    report = repair.recover_table(storage, lease_timeout_ms=timeout)
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


@cli.command()
@click.argument("table")
@click.option("--dry-run", is_flag=True, help="List what would be deleted; read-only, runs beside a live writer.")
@click.option("--older-than", default="1h", show_default=True, help="Only files older than this (protects in-flight batches).")
@click.option("--lease-timeout", default="60s", show_default=True, help="How long gc's own lease lasts without a heartbeat.")
@_json_option
@click.pass_obj
def gc(ctx: CliContext, table: str, dry_run: bool, older_than: str, lease_timeout: str, local_json: bool) -> None:
    """Delete orphan data files and stale staging that no retained manifest entry references, and
    temp files killed writers left.

    Takes the table's lease (a dataset group's, for a group or one of its tables): stop the
    query first. A dry run takes no lease. On a group root every table of the group is collected.
    """
    from ..maintenance.gc import collect_garbage

    out = _out(ctx, local_json)
    with progress.activity("gc", show=progress.wanted(out.as_json)) as tell:
        tell("listing the table and its logs")
        report = collect_garbage(
            ctx.storage(table),
            older_than_ms=parse_duration_ms(older_than, key="--older-than"),
            dry_run=dry_run,
            lease_timeout_ms=parse_duration_ms(lease_timeout, key="--lease-timeout"),
        )
    if out.as_json:
        return out.json(
            {
                "dryRun": dry_run,
                "writerLive": report.writer_live,
                "tables": report.tables,
                "orphans": [{"uri": u, "size": s} for u, s in report.orphans],
                "staging": report.staging,
                "tempFiles": [{"uri": u, "size": s} for u, s in report.temp_files],
                "youngSkipped": report.young_skipped,
                "pendingCommits": report.pending_batches,
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
    if report.pending_batches:
        out.write(f"kept every file of pending commit(s) {', '.join(map(str, report.pending_batches))}; `seo recover` completes them")
    tables = f" in {len(report.tables)} tables" if len(report.tables) > 1 else ""
    out.write(
        f"{verb} {len(report.orphans)} orphan files ({human_bytes(report.bytes)}){tables}, {len(report.staging)} staging dirs "
        f"and {len(report.temp_files)} temp files; "
        f"{report.young_skipped} younger than {older_than} kept"
    )


@cli.command()
@click.argument("table")
@click.option("--as-of", type=int, default=None)
@click.option("--limit", type=int, default=20, show_default=True)
@_json_option
@click.pass_obj
def read(ctx: CliContext, table: str, as_of: int | None, limit: int, local_json: bool) -> None:
    """Print committed rows (needs the [arrow] extra)."""
    from ..readers.arrow_reader import dataset

    out = _out(ctx, local_json)
    data = dataset(table, as_of=as_of, storage_options=ctx.storage_options)
    rows = data.head(limit).to_pylist()
    if out.as_json:
        return out.json(rows)
    columns = data.schema.names
    out.table([[row.get(c) for c in columns] for row in rows], columns, exact=True)
    out.write(f"{len(rows)} of {data.count_rows()} rows")


@cli.command()
@click.argument("table")
@click.option("--batch", type=int, default=None, help="Compact batch to index (default: every compact file).")
@_json_option
@click.pass_obj
def index(ctx: CliContext, table: str, batch: int | None, local_json: bool) -> None:
    """Build the Parquet index of compact manifest files (fast readers for huge tables)."""
    from ..manifest.manifest_index import write_index
    from ..table.identity import read_identity
    from ..table.table_logs import open_manifest

    out = _out(ctx, local_json)
    storage = ctx.storage(table)
    log_ = open_manifest(storage, read_identity(storage))
    targets = [batch] if batch is not None else [b for b, n in log_.list_batch_files().items() if n.endswith(".compact")]
    built = [b for b in sorted(targets) if write_index(storage, b, log_)]
    if out.as_json:
        return out.json({"indexed": built})
    out.write(f"indexed compact batches: {built or 'none'}")


@cli.command(context_settings={"ignore_unknown_options": False})
@click.argument("job")
@click.option("--conf", "conf_path", default=None, help="TOML config file, or a packaged one by name (default: local).")
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE", help="Override a config value.")
@click.option("--jobs-dir", default=None, help="Where jobs live (default: ./jobs, then the packaged example jobs).")
@_json_option
@click.pass_obj
def run(ctx: CliContext, job: str, conf_path: str | None, overrides: tuple[str, ...], jobs_dir: str | None, local_json: bool) -> None:
    """Run a job (yours in ./jobs, or a packaged example) with a TOML config, printing progress per batch."""
    from .job_runner import run_job

    out = _out(ctx, local_json)
    code = run_job(job, conf_path=conf_path, overrides=list(overrides), jobs_dir=jobs_dir, out=out)
    sys.exit(code)


def _debug(argv: list[str] | None) -> bool:
    args = sys.argv[1:] if argv is None else argv
    return "--debug" in args or os.environ.get("SEO_DEBUG", "").strip().lower() not in ("", "0", "false", "no")


def main(argv: list[str] | None = None) -> None:
    """Run the CLI: any error is one line on stderr and exit code 1 (see the module docstring)."""
    try:
        cli.main(args=argv, prog_name="seo", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except SystemExit:
        raise
    except ExactlyOnceError as exc:
        _fail(f"error: {_one_line(str(exc))}", argv)
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        _fail(f"error: {_one_line(str(exc))}", argv)
    except Exception as exc:  # not ours: still one line, and a way to see more
        _fail(
            f"error: unexpected {type(exc).__name__}: {_one_line(str(exc))[:300]} (this is a bug in streaming-exactly-once "
            "or a dependency; run with --debug or SEO_DEBUG=1 for the traceback and report it)",
            argv,
        )


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _fail(line: str, argv: list[str] | None) -> None:
    if _debug(argv):
        traceback.print_exc()
    click.echo(line, err=True)
    sys.exit(EXIT_FAILED)


if __name__ == "__main__":
    main()
