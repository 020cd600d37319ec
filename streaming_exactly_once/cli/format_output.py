"""``seo status``: the lines about a table's formats - what readers find, and the Delta log's
and Iceberg table's state next to the manifest."""

from __future__ import annotations

from typing import Any


def table_format_lines(info: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``delta`` and ``iceberg`` lines of a table's status (none for a plain table)."""
    lines = []
    if info.get("delta") is not None:
        lines.append(("delta", _delta_text(info["delta"])))
    if info.get("iceberg") is not None:
        lines.append(("iceberg", _iceberg_text(info["iceberg"])))
    return lines


def format_text(info: dict[str, Any]) -> str:
    """What readers find: ``delta (Parquet files; _delta_log and _spark_metadata)`` or ``parquet``."""
    files = info.get("format")
    formats = [name for name in ("delta", "iceberg") if info.get(name) is not None]
    if not formats:
        return str(files or "-")
    logs = [{"delta": "_delta_log", "iceberg": "metadata/"}[name] for name in formats]
    logs.append("_spark_metadata" if "manifest" not in info else info["manifest"])
    return f"{' + '.join(formats)} ({files} files; {', '.join(logs[:-1])} and {logs[-1]})"


def _delta_text(delta: dict[str, Any]) -> str:
    app = f"; app id {delta['appId']}" if delta.get("appId") else ""
    if "missingExtra" in delta:
        return f"not checked: {delta['error']}{app}"
    if "error" in delta:
        return f"ERROR: {delta['error']}{app}"
    if delta.get("version") is None:
        return f"no Delta log yet (the first batch creates it){app}"
    return f"version {delta['version']}, holds batches up to {delta['batchId']}{app}"


def _iceberg_text(iceberg: dict[str, Any]) -> str:
    where = f"; catalog {iceberg['catalog']}" if iceberg.get("catalog") else ""
    if "missingExtra" in iceberg or "missingCatalog" in iceberg:
        return f"not checked: {iceberg['error']}{where}"
    if "error" in iceberg:
        return f"ERROR: {iceberg['error']}{where}"
    if iceberg.get("snapshotId") is None:
        return f"no Iceberg table yet (the first batch creates it){where}"
    return f"snapshot {iceberg['snapshotId']}, holds batches up to {iceberg['batchId']}; {iceberg['metadata']}{where}"


def refusal_lines(info: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``last refusal`` line of a table's or group's status: the error, batch and time of
    the last batch the sink refused (``table.refusal``); none if it never refused one."""
    from .printer import human_time

    if "refusalError" in info:
        return [("last refusal", f"ERROR: {info['refusalError']}")]
    refusal = info.get("lastRefusal")
    if refusal is None:
        return []
    query = f" of query {refusal['queryId']}" if refusal["queryId"] else ""
    since = "a batch committed since" if refusal["committedSince"] else "nothing committed since"
    when = human_time(refusal["timeMs"])
    return [("last refusal", f"{refusal['error']} in batch {refusal['sparkBatchId']}{query}, {when} ({since})")]


def refusal_message(info: dict[str, Any]) -> list[str]:
    """The last refusal's message, indented, to print under the status block."""
    refusal = info.get("lastRefusal")
    return ["  " + line for line in refusal["message"].splitlines()] if refusal else []
