"""MkDocs hook: the observability page's tables, generated from the code's own declarations.

``<!-- metrics -->`` becomes the table of every metric (``streaming_exactly_once.observability.catalog``),
``<!-- alerts -->`` the table of every shipped alert rule with its default thresholds
(``streaming_exactly_once.observability.alerts``).
"""

from __future__ import annotations

from typing import Any


def alerts_table() -> str:
    from streaming_exactly_once.observability.alerts import ALERTS, DEFAULTS

    lines = ["| alert | severity | fires when (default thresholds) | for |", "|---|---|---|---|"]
    for alert in ALERTS:
        expr = alert.expr.format(**DEFAULTS).replace("|", "\\|")
        lines.append(f"| `{alert.name}` | {alert.severity} | `{expr}` | {alert.for_.format(**DEFAULTS)} |")
    return "\n".join(lines)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if "<!-- metrics -->" in markdown:
        from streaming_exactly_once.observability.catalog import markdown_table

        markdown = markdown.replace("<!-- metrics -->", markdown_table())
    if "<!-- alerts -->" in markdown:
        markdown = markdown.replace("<!-- alerts -->", alerts_table())
    return markdown
