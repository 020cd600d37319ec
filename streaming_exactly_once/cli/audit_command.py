"""``seo audit``: prove from each batch's ledger that a table holds every acknowledged record once
(``maintenance.audit``). Exit 0 when every check passed, 1 on a violation."""

from __future__ import annotations

import sys
from typing import Any

import click

from . import progress
from .context import EXIT_FAILED, CliContext, json_option, printer_for
from .printer import Printer


@click.command()
@click.argument("table")
@click.option(
    "--from",
    "from_batch",
    type=click.IntRange(min=0),
    default=None,
    metavar="BATCH",
    help="Audit again from this batch (default: after the last audit's mark).",
)
@click.option("--no-record", is_flag=True, help="Do not save the audited-up-to mark and verdict in the table.")
@json_option
@click.pass_obj
def audit(ctx: CliContext, table: str, from_batch: int | None, no_record: bool, local_json: bool) -> None:
    """Check the table's exactly-once invariants batch by batch, from where the last audit stopped."""
    from ..maintenance.audit import audit_table

    out = printer_for(ctx, local_json)
    with progress.activity("audit", show=progress.wanted(out.as_json)) as tell:
        tell(f"auditing {table}")
        report = audit_table(ctx.storage(table), from_batch=from_batch, record=not no_record)
    if out.as_json:
        out.json(report.to_json())
    else:
        _print(out, report.to_json())
    if not report.passed:
        sys.exit(EXIT_FAILED)


def _print(out: Printer, doc: dict[str, Any]) -> None:
    violations = doc["violations"]
    for v in violations:
        where = f"batch {v['batchId']}" if v["batchId"] is not None else "table"
        out.write(f"VIOLATION [{v['check']}] {v['table']} {where}: {v['message']}")
    for t in [doc, *doc["tables"]]:
        span = "nothing new" if t["auditedTo"] is None else f"batches {t['auditedFrom']}..{t['auditedTo']}"
        notes = []
        if t["unaudited"]:
            first, last = t["unaudited"][0][0], t["unaudited"][-1][1]
            notes.append(f"batches {first}..{last} unaudited (written before the ledger existed; it starts at batch {t['ledgerFrom']})")
        if t["inFlight"]:
            notes.append(f"batches {t['inFlight']} in flight (a pending commit; audited once it completes)")
        for check, why in t["skipped"].items():
            notes.append(f"{check} not checked: {why}")
        verdict = "OK" if t["passed"] else "VIOLATIONS"
        out.write(f"{t['table']}: {verdict} - {span}, latest batch {t['latestBatchId']}" + "".join(f"; {n}" for n in notes))
    if violations:
        out.write(f"{len(violations)} violation(s): `seo audit --json` lists them with their files and offsets.")
