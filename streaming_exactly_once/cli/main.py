"""``seo``: inspect, verify, repair and run exactly-once tables from the shell.

Every command takes ``--json``: one document, keys in camelCase (``json_keys``; a JSON schema per
command in the docs). Errors are one line on stderr and a non-zero exit code
(1 = the command failed; 2 = bad usage; ``verify`` exits 3 when it found only warnings;
4 = the table needs an extra that is not installed, or an Iceberg catalog this environment has
no configuration of, which the message names; 130 = interrupted). That holds for *any* error, the library's own and unexpected ones alike:
``--debug`` (or ``SEO_DEBUG=1``) prints the traceback as well.
Only ``run`` starts Spark; the other commands need neither pyspark nor a JVM.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from typing import TYPE_CHECKING, Any, NoReturn

import click

from .. import extras
from ..errors import CatalogNotConfiguredError, ExactlyOnceError, MissingDependencyError
from . import progress
from .audit_command import audit
from .context import EXIT_FAILED, EXIT_MISSING_EXTRA, EXIT_WARNINGS, CliContext, json_option, printer_for, storage_options
from .format_output import format_text, refusal_lines, refusal_message, table_format_lines
from .maintenance_commands import compact, gc, recover
from .printer import Printer, human_bytes, human_time

if TYPE_CHECKING:
    from ..log.batch_log import BatchLog

#: The package's version (its ``__init__`` is imported whenever this module is; read from there
#: instead of importing it, which would pull in the sink's modules for the import contracts).
VERSION = str(getattr(sys.modules.get(__name__.split(".")[0]), "__version__", "unknown"))


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
    ctx.obj = CliContext(as_json, storage_options(storage_option))


@cli.command()
@click.argument("table")
@json_option
@click.pass_obj
def status(ctx: CliContext, table: str, local_json: bool) -> None:
    """Latest batch, writer and epoch, pending commits, files, bytes, rows, watermarks."""
    from ..maintenance.status import table_status

    out = printer_for(ctx, local_json)
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
            *refusal_lines(info),
        ]
    )
    _print_refusal(out, info)
    queries = info.get("queries") or []
    if queries:
        out.write()
        out.table(
            [(_query_name(q["queryId"]), q["lastSparkBatchId"], q["lastBatchId"], human_time(q["commitTimeMs"]), q["watermarks"]) for q in queries],
            ["query id", "last spark batch", "table batch", "committed", "watermarks"],
        )
    offsets = info.get("sourceOffsets") or {}
    if offsets:
        out.write()
        out.table(sorted(offsets.items()), ["source partition", "committed up to (startingOffsets)"])


def _print_refusal(out: Printer, info: dict[str, Any]) -> None:
    message = refusal_message(info)
    if message:
        out.write()
        out.write("last refusal's message:")
        for line in message:
            out.write(line)


def _query_name(query_id: str) -> str:
    """A query id as a person reads it: the library's own batches (``seo compact``'s, an
    adoption's) are named so."""
    from ..table.library_queries import LIBRARY_QUERIES

    return f"{query_id} ({LIBRARY_QUERIES[query_id]})" if query_id in LIBRARY_QUERIES else query_id


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
            *refusal_lines(info),
        ]
    )
    _print_refusal(out, info)
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
        out.table(rows, ["table", "status", "table batch", "status of group batch", "rows", "set aside", "watermarks (low..high)", "failed checks"])
    for source, parts in sorted(info.get("sourcePartitions", {}).items()):
        out.write()
        out.table([(p, v.get("low"), v.get("high")) for p, v in sorted(parts.items())], [f"source {source} partition", "low", "high"])


@cli.command()
@click.argument("table")
@click.option("--kind", type=click.Choice(["manifest", "offsets", "commits", "sources"]), default="manifest", show_default=True)
@click.option("--batch", type=int, default=None, help="Show the records of one batch file.")
@json_option
@click.pass_obj
def log(ctx: CliContext, table: str, kind: str, batch: int | None, local_json: bool) -> None:
    """List a log's batches (with commit info), or the records of one batch."""
    from ..table.identity import read_identity
    from ..table.table_logs import TableLogs
    from .log_output import print_batch_records, print_group_batches, print_table_history

    out = printer_for(ctx, local_json)
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
@json_option
@click.pass_obj
def files(ctx: CliContext, table: str, as_of: int | None, no_verify: bool, local_json: bool) -> None:
    """The committed data files (what every reader sees), checked like a reader checks them."""
    from ..readers.visibility import committed_files

    out = printer_for(ctx, local_json)
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
@json_option
@click.pass_obj
def verify(ctx: CliContext, table: str, no_orphans: bool, show_all: bool, examples: int, no_schemas: bool, local_json: bool) -> None:
    """Check the manifest and logs against storage. Exit 0 clean, 1 errors, 3 warnings only."""
    from ..maintenance.verify import verify_table
    from .verify_output import print_report

    out = printer_for(ctx, local_json)
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
@click.option("--as-of", type=int, default=None)
@click.option("--limit", type=int, default=20, show_default=True)
@json_option
@click.pass_obj
def read(ctx: CliContext, table: str, as_of: int | None, limit: int, local_json: bool) -> None:
    """Print committed rows (needs the [arrow] extra)."""
    from ..readers.arrow_reader import dataset

    out = printer_for(ctx, local_json)
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
@json_option
@click.pass_obj
def index(ctx: CliContext, table: str, batch: int | None, local_json: bool) -> None:
    """Build the Parquet index of compact manifest files (fast readers for huge tables)."""
    from ..manifest.manifest_index import write_index
    from ..table.identity import read_identity
    from ..table.table_logs import open_manifest

    out = printer_for(ctx, local_json)
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
@json_option
@click.pass_obj
def run(ctx: CliContext, job: str, conf_path: str | None, overrides: tuple[str, ...], jobs_dir: str | None, local_json: bool) -> None:
    """Run a job (yours in ./jobs, or a packaged example) with a TOML config, printing progress per batch."""
    extras.require("spark", what="seo run")
    from .job_runner import run_job

    out = printer_for(ctx, local_json)
    code = run_job(job, conf_path=conf_path, overrides=list(overrides), jobs_dir=jobs_dir, out=out)
    sys.exit(code)


for _command in (recover, gc, compact, audit):
    cli.add_command(_command)


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
    except (MissingDependencyError, CatalogNotConfiguredError) as exc:
        _fail(f"error: {_one_line(str(exc))}", argv, EXIT_MISSING_EXTRA)
    except ExactlyOnceError as exc:
        _fail(f"error: {_one_line(str(exc))}", argv)
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        _fail(f"error: {_one_line(str(exc))}", argv)
    except ModuleNotFoundError as exc:
        refusal = extras.missing_extra(exc)
        if refusal is None:
            _fail_unexpected(exc, argv)
        _fail(f"error: {_one_line(str(refusal))}", argv, EXIT_MISSING_EXTRA)
    except OSError as exc:
        if exc.errno not in _ENVIRONMENT_ERRNOS:
            _fail_unexpected(exc, argv)
        _fail(f"error: {_one_line(str(exc))} (the storage or the system refused; not a bug in streaming-exactly-once)", argv)
    except Exception as exc:
        _fail_unexpected(exc, argv)


#: What the disk, the mount or the system refuses: a person fixes the storage, it is no bug here.
_ENVIRONMENT_ERRNOS = frozenset(
    {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.EMFILE}
)


def _fail_unexpected(exc: Exception, argv: list[str] | None) -> NoReturn:
    """Not ours and not the storage's: still one line, and a way to see more."""
    _fail(
        f"error: unexpected {type(exc).__name__}: {_one_line(str(exc))[:300]} (this is a bug in streaming-exactly-once "
        "or a dependency; run with --debug or SEO_DEBUG=1 for the traceback and report it)",
        argv,
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _fail(line: str, argv: list[str] | None, code: int = EXIT_FAILED) -> NoReturn:
    if _debug(argv):
        traceback.print_exc()
    click.echo(line, err=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
