"""One key style in every ``--json`` document: camelCase, as in Spark's progress events.

Reports built from dataclasses carry Python's snake_case field names; ``camel_keys`` renames the
keys a command defines (never data: column names, table names and file names stay as they are).
The documents' shapes are JSON schemas in the docs (``docs/cli/schemas``), checked by the tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def camel(name: str) -> str:
    """``latest_batch_id`` -> ``latestBatchId``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_keys(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record with its own (top-level) keys in camelCase; values are left alone."""
    return {camel(str(k)): v for k, v in record.items()}
