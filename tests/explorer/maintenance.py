"""``seo`` maintenance commands as an operator runs them between runs (in this process, through
the CLI's own entry point: its arguments, exit codes and JSON output).

What each may end with: ``verify`` exits 0 (clean) or 3 (warnings only: orphans ``gc`` deletes, a
pending commit the next writer settles); ``audit`` exits 0 (its ledger checks pass; batches a
pending commit completes are in flight, not violations); ``gc``, ``recover`` and ``compact`` exit 0, or refuse
what the docs say they refuse (``compact`` of a format it does not take, any command on a
directory that holds no table yet).
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import TYPE_CHECKING, Any

from tests.explorer.model import Failure
from tests.explorer.state import COMPACTION, DOWNSTREAM_MAX_FILE_AGE
from tests.explorer.tables import has_manifest

if TYPE_CHECKING:
    from tests.explorer.interpreter import Interpreter

COMPACT_FORMATS = ("parquet", "delta", "iceberg", "delta+iceberg")


def seo(*args: str) -> tuple[int, str, str]:
    """``seo ARGS`` in this process: (exit code, stdout, stderr)."""
    from streaming_exactly_once.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def command(it: Interpreter, cmd: str) -> None:
    table = str(it.world.table)
    exists = has_manifest(it)
    if cmd == "verify":
        args = ["verify", table, "--json"]
    elif cmd == "gc":
        args = ["gc", table, "--older-than", "0s", "--json"]
    elif cmd == "gc-short":  # time travel kept for one batch: what compaction replaced goes
        args = ["gc", table, "--older-than", "0s", "--min-batches-to-retain", "1", "--json"]
    elif cmd == "gc-dry":
        args = ["gc", table, "--dry-run", "--older-than", "0s", "--json"]
    elif cmd == "recover":
        args = ["recover", table, "--json"]
    elif cmd == "compact":
        args = compact_args(it)
    elif cmd == "audit":
        args = ["audit", table, "--json"]
    else:
        raise ValueError(cmd)
    with it.timed("seo"):
        code, out, err = seo(*args)
    it.feature(f"maint:{cmd.split('-')[0]}")
    it.say(f"    seo {' '.join(args[:1])} -> {code} {err.strip()[:200]}")
    allowed = {0, 3} if cmd == "verify" else {0}
    if not exists:
        allowed |= {1}  # nothing to maintain yet: a named error
    created = it.table.created or it.setup
    if cmd == "compact" and created.format not in COMPACT_FORMATS:
        allowed |= {1}
    if code not in allowed:
        it.fail(f"seo-{cmd}", "cli", f"exit {code}: {err.strip()[:400]} {_summary(out)}")


def compact_args(it: Interpreter) -> list[str]:
    args = ["compact", str(it.world.table), "--min-age", COMPACTION["min_age"], "--min-files", str(COMPACTION["min_files"])]
    args += ["--target-size", COMPACTION["target_size"], "--json"]
    if it.downstream is not None and it.setup.downstream == "registered":
        args += ["--consumer", str(it.downstream.checkpoint), "--consumer-max-file-age", DOWNSTREAM_MAX_FILE_AGE]
    return args


def verify_clean(it: Interpreter) -> list[Failure]:
    """The end of a program: ``seo verify`` finds no error (warnings are fine)."""
    if not has_manifest(it):
        return []
    with it.timed("seo"):
        code, out, err = seo("verify", str(it.world.table), "--json")
    it.feature("maint:verify")
    if code in (0, 3):
        return []
    return [Failure("seo-verify", "cli", f"exit {code}: {err.strip()[:300]} {_summary(out)}", it.step)]


def audit_clean(it: Interpreter) -> list[Failure]:
    """The end of a program: ``seo audit`` from batch 0 finds every batch's ledger consistent with
    the table (each offset and row once, every live file intact, the formats in step)."""
    if not has_manifest(it):
        return []
    with it.timed("seo"):
        code, out, err = seo("audit", str(it.world.table), "--from", "0", "--no-record", "--json")
    it.feature("maint:audit")
    if code == 0:
        return []
    return [Failure("seo-audit", "cli", f"exit {code}: {err.strip()[:300]} {_summary(out)}", it.step)]


def _summary(out: str) -> str:
    try:
        data: Any = json.loads(out)
    except ValueError:
        return out.strip()[:300]
    if isinstance(data, dict):
        problems = data.get("problems") or data.get("errors") or data.get("violations") or []
        return json.dumps(problems)[:400] if problems else json.dumps(data)[:300]
    return str(data)[:300]
