"""Parsing of configuration values, read at the edges (sink options, CLI, job configs).

Lower layers take plain values (milliseconds, ints, tuples); only the sink, the CLI and the
jobs turn user text - ``"10m"``, ``"true"``, a TOML file, ``SEO_*`` environment variables -
into them, with errors that name the key and list what is valid.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from .errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {None: 1000, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(value: Any, *, key: str) -> int:
    """``"10m"``, ``"30s"``, ``"500ms"``, ``"2h"``, ``"1d"`` or a number of seconds -> milliseconds."""
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be a duration like '30s' or '10m', got {value!r}", key=key)
    if isinstance(value, (int, float)):
        if value < 0:
            raise ConfigError(f"{key} must not be negative, got {value!r}", key=key)
        return int(value * 1000)
    match = _DURATION.match(str(value))
    if match is None:
        raise ConfigError(f"{key} must be a duration like '500ms', '30s', '10m', '2h' or '1d', got {value!r}", key=key)
    unit = match.group(2).lower() if match.group(2) else None
    return int(float(match.group(1)) * _UNIT_MS[unit])


def parse_bool(value: Any, *, key: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{key} must be true or false, got {value!r}", key=key)


def parse_int(value: Any, *, key: str, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be an integer, got {value!r}", key=key)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be an integer, got {value!r}", key=key) from None
    if minimum is not None and number < minimum:
        raise ConfigError(f"{key} must be >= {minimum}, got {number}", key=key)
    if maximum is not None and number > maximum:
        raise ConfigError(f"{key} must be <= {maximum}, got {number}", key=key)
    return number


def parse_choice(value: Any, *, key: str, choices: Iterable[str]) -> str:
    options = list(choices)
    if value not in options:
        raise ConfigError(f"{key} must be one of {', '.join(map(repr, options))}, got {value!r}", key=key)
    return value


def reject_unknown(given: Iterable[str], valid: Iterable[str], *, where: str) -> None:
    """A clear error for unknown keys, listing the valid ones (typos are the usual cause)."""
    valid_set = sorted(set(valid))
    unknown = sorted(set(given) - set(valid_set))
    if unknown:
        raise ConfigError(
            f"Unknown key(s) {', '.join(map(repr, unknown))} in {where}. Valid keys: {', '.join(valid_set)}.",
            unknown=unknown,
            valid=valid_set,
        )
