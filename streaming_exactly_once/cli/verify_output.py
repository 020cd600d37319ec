"""``seo verify`` for people: a summary first, problems grouped by kind, a few examples of each.

A table can have thousands of orphan files (a crashed writer of Spark's own sink, say): a line
for each buries the one error that matters. The summary counts every kind; ``--all`` lists them
all, and ``--json`` always has every problem.
"""

from __future__ import annotations

from ..maintenance.reports import Problem, VerifyReport
from .printer import Printer, human_bytes


def print_report(out: Printer, report: VerifyReport, *, limit: int | None) -> None:
    """The report: per kind (errors first) its count and its first ``limit`` problems (None: all)."""
    groups: dict[tuple[str, str], list[Problem]] = {}
    for problem in report.problems:
        groups.setdefault((problem.severity, problem.kind), []).append(problem)
    ordered = sorted(groups.items(), key=lambda item: (item[0][0] != "error", item[0][1]))
    if ordered:
        out.table([(severity, kind, len(problems)) for (severity, kind), problems in ordered], ["severity", "kind", "count"])
    hidden = 0
    for (severity, kind), problems in ordered:
        shown = problems if limit is None else problems[:limit]
        hidden += len(problems) - len(shown)
        out.write()
        out.write(f"{severity} {kind} ({len(problems)}):")
        for problem in shown:
            out.write(f"  {problem.path}  {problem.detail}")
        if len(shown) < len(problems):
            out.write(f"  ... and {len(problems) - len(shown)} more")
    if hidden:
        out.write()
        out.write(f"{hidden} more problems not listed: `seo verify --all` lists every one, `--json` too")
    verdict = "OK" if not report.problems else ("ERRORS" if report.errors else "warnings only")
    if ordered:
        out.write()
    out.write(
        f"{report.table}: {verdict} - batch {report.latest_batch_id}, {report.files} files, {human_bytes(report.bytes)}, "
        f"{len(report.errors)} errors, {len(report.warnings)} warnings"
    )
