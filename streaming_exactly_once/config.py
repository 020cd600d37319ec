"""Parsing of configuration values, read at the edges (sink options, CLI, job configs).

Lower layers take plain values (milliseconds, ints, tuples); only the sink, the CLI and the
jobs turn user text - ``"10m"``, ``"true"``, a TOML file, ``SEO_*`` environment variables -
into them, with errors that name the key and list what is valid.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import ConfigError

#: Duration units, each with the spellings users write: the short forms (``30s``, ``10m``) and
#: Spark's interval words (``"10 seconds"`` in ``trigger(processingTime=...)`` and ``withWatermark``).
_UNIT_MS: dict[str, int] = {}
for _ms, _names in (
    (1, ("ms", "msec", "msecs", "millisecond", "milliseconds")),
    (1000, ("s", "sec", "secs", "second", "seconds")),
    (60_000, ("m", "min", "mins", "minute", "minutes")),
    (3_600_000, ("h", "hr", "hrs", "hour", "hours")),
    (86_400_000, ("d", "day", "days")),
    (604_800_000, ("w", "week", "weeks")),
):
    _UNIT_MS.update(dict.fromkeys(_names, _ms))
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)?\s*,?", re.IGNORECASE)
DURATION_EXAMPLES = "'500ms', '30s', '10m', '2h', '1d', '10 seconds', '1 hour 30 minutes', a timedelta or a number of seconds"


def _parse_duration_text(text: str) -> int | None:
    """Milliseconds of ``"1h30m"``, ``"1 hour 30 minutes"``, ``"interval 10 seconds"``, ``"45"``; None if not a duration."""
    body = text.strip().lower()
    body = body.removeprefix("interval").strip()
    if not body:
        return None
    total, pos, parts = 0.0, 0, 0
    while pos < len(body):
        match = _PART.match(body, pos)
        if match is None or match.end() == pos:
            return None
        number, unit = float(match.group(1)), match.group(2)
        if unit is None:
            if parts or match.end() < len(body):
                return None  # a bare number is seconds, and only alone
            unit = "s"
        if unit not in _UNIT_MS:
            return None
        total += number * _UNIT_MS[unit]
        pos, parts = match.end(), parts + 1
    return int(total)


def parse_duration_ms(value: Any, *, key: str) -> int:
    """A duration -> milliseconds: ``"500ms"``, ``"30s"``, ``"10m"``, ``"2h"``, ``"1d"``, Spark's
    interval spelling (``"10 seconds"``, ``"1 hour 30 minutes"``), compounds (``"1h30m"``), a
    ``datetime.timedelta`` (``pandas.Timedelta`` too) or a number of seconds."""
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be a duration like {DURATION_EXAMPLES}; got {value!r}", key=key)
    if isinstance(value, _dt.timedelta):
        if value < _dt.timedelta(0):
            raise ConfigError(f"{key} must not be negative, got {value!r}", key=key)
        return int(value / _dt.timedelta(milliseconds=1))
    if isinstance(value, (int, float)):
        if value < 0:
            raise ConfigError(f"{key} must not be negative, got {value!r}", key=key)
        return int(value * 1000)
    if isinstance(value, str):
        if value.strip().startswith("-"):
            raise ConfigError(f"{key} must not be negative, got {value!r}", key=key)
        ms = _parse_duration_text(value)
        if ms is not None:
            return ms
    raise ConfigError(f"{key} must be a duration like {DURATION_EXAMPLES}; got {value!r}", key=key)


#: ``DataStreamWriter.trigger`` keywords whose value is an interval.
_TRIGGER_INTERVALS = ("processingTime", "continuous")


def spark_trigger(trigger: Any) -> dict[str, Any]:
    """``DataStreamWriter.trigger``'s keyword arguments from what ``sink.start`` takes: Spark's own
    (``{"availableNow": True}``, ``{"processingTime": "10 seconds"}``), an interval in any spelling
    the options take (``{"processingTime": "10s"}``, a ``timedelta``), or a bare interval
    (``"10s"``: a processing-time trigger). Spark parses only its own spelling, so an interval is
    handed over in milliseconds."""
    if trigger is None:
        return {}
    given = dict(trigger) if isinstance(trigger, Mapping) else {"processingTime": trigger}
    for key in _TRIGGER_INTERVALS:
        if given.get(key) is not None:
            given[key] = f"{parse_duration_ms(given[key], key=f'trigger {key}')} milliseconds"
    return given


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(value: Any, *, key: str) -> int:
    """A size -> bytes: a number of bytes, or ``"512KB"``, ``"128MB"``, ``"1 GiB"`` (a kilobyte
    is 1024 bytes, as Spark's ``maxPartitionBytes`` counts)."""
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be a size like 134217728, '128MB' or '1GB'; got {value!r}", key=key)
    if isinstance(value, int) and value >= 0:
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None or match.group(2).lower() not in _SIZE_UNITS:
        raise ConfigError(f"{key} must be a size like 134217728, '128MB' or '1GB'; got {value!r}", key=key)
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


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
    chosen: str = value  # one of the choices
    return chosen


def reject_unknown(given: Iterable[str], valid: Iterable[str], *, where: str) -> None:
    """A clear error for unknown keys, listing the valid ones (typos are the usual cause)."""
    valid_set = sorted(set(valid))
    unknown = sorted(set(given) - set(valid_set))
    if unknown:
        close = {u: m[0] for u in unknown if (m := difflib.get_close_matches(u, valid_set, n=1))}
        if len(unknown) == 1 and close:
            guess = f" Did you mean {close[unknown[0]]!r}?"
        else:
            guess = "".join(f" Did you mean {m!r} for {u!r}?" for u, m in close.items())
        raise ConfigError(
            f"Unknown key(s) {', '.join(map(repr, unknown))} in {where}.{guess} Valid keys: {', '.join(valid_set)}.",
            unknown=unknown,
            valid=valid_set,
        )


# --- job configuration files ------------------------------------------------------------------

TRIGGER_KEYS = {"mode": "str", "interval": "str"}
SECRET_MARKERS = ("secret", "password", "token", "key", "credential")


def parse_table_text(text: str) -> dict[str, str]:
    """A table given as text (an environment variable): ``k=v,k2=v2``."""
    return dict(item.split("=", 1) for item in text.split(",") if "=" in item)


def _coerce(value: Any, kind: str, *, key: str) -> Any:
    if kind == "str":
        return str(value)
    if kind == "int":
        return parse_int(value, key=key)
    if kind == "float":
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key} must be a number, got {value!r}", key=key) from None
    if kind == "bool":
        return parse_bool(value, key=key)
    if kind == "duration":
        parse_duration_ms(value, key=key)  # validate, keep the user's text
        return value
    if kind == "list":
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, (list, tuple)):
            return list(value)
        raise ConfigError(f"{key} must be a list (or comma-separated text), got {value!r}", key=key)
    if kind == "table":
        if isinstance(value, str):  # from the environment: k=v,k2=v2
            return parse_table_text(value)
        if isinstance(value, Mapping):
            return {str(k): v for k, v in value.items()}
        raise ConfigError(f"{key} must be a table of key = value, got {value!r}", key=key)
    return value  # "any"


def load_job_config(
    path: str | Path | None,
    *,
    spec: Mapping[str, Mapping[str, str]],
    overrides: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    open_sections: tuple[str, ...] = ("spark", "storage"),
) -> dict[str, dict[str, Any]]:
    """Read a TOML job config; ``SEO_<SECTION>__<KEY>`` env vars override it, ``--set`` overrides those.

    ``spec`` lists the keys each section accepts and their kind; sections in ``open_sections``
    (Spark settings, storage options) accept any key. Unknown sections and keys are rejected
    with the valid ones listed.
    """
    import tomllib

    environ = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist (give a TOML file or a packaged config name)", key="conf")
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {p} is not valid TOML: {exc}", key="conf") from None
    sections = list(dict.fromkeys([*spec, *open_sections]))  # in a fixed order: seo run prints them so
    reject_unknown(data, sections, where=f"{path or 'the configuration'} (sections)")
    config: dict[str, dict[str, Any]] = {name: dict(data.get(name, {})) for name in sections}
    for key, value in environ.items():
        if not key.startswith("SEO_") or "__" not in key:
            continue
        section, _, name = key[4:].partition("__")
        section, name = section.lower(), name.lower()
        if section in sections:
            config[section][name if section not in open_sections else name.replace("__", ".")] = value
    for item in overrides:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise ConfigError(f"--set takes section.key=value, got {item!r}", key="--set")
        dotted, value = item.split("=", 1)
        section, name = dotted.split(".", 1)
        if section not in sections:
            reject_unknown([section], sections, where="--set")
        config[section][name] = value
    for section, keys in spec.items():
        reject_unknown(config[section], keys, where=f"[{section}]")
        for name, value in list(config[section].items()):
            config[section][name] = _coerce(value, keys[name], key=f"{section}.{name}")
    return config


def redacted(config: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """A copy safe to print or log: values of secret-looking keys are masked."""
    out: dict[str, dict[str, Any]] = {}
    for section, values in config.items():
        out[section] = {}
        for key, value in values.items():
            secret = any(marker in key.lower() for marker in SECRET_MARKERS) and key.lower() not in ("partition_by",)
            out[section][key] = "***" if secret and value not in (None, "") else value
    return out
