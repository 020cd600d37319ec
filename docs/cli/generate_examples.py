"""Writes docs/cli-examples.md: every ``seo`` command run for real on a table ``seo run`` writes.

    python docs/cli/generate_examples.py            # rewrite the page
    python docs/cli/generate_examples.py --check    # exit 1 if a new run prints otherwise

tests/docs/test_cli_examples.py runs the check, so the page shows what the commands print now.
The page keeps the values of the run that wrote it; the check compares what does not change
from run to run (``shape``): every label, column and message, not the ids, times and sizes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "cli-examples.md"
WORK = Path("/tmp/seo-cli")
TABLE = str(WORK / "events")
SAMPLES = REPO / "jobs" / "sample_data" / "landing"


def sets(sample: str) -> list[str]:
    """``seo run``'s settings: the files of ``WORK/sample`` land, four a batch."""
    return [
        *("--set", f"source.sample_data={WORK}/{sample}"),
        *("--set", f"source.landing={WORK}/landing"),
        *("--set", "source.files_per_trigger=4"),
        *("--set", f"sink.table={TABLE}"),
        *("--set", f"sink.checkpoint={WORK}/checkpoint"),
        *("--set", "sink.compact_interval=3"),
    ]


#: (heading, what it shows, the command's arguments); run in this order on one table.
STEPS: list[tuple[str, str, list[str]]] = [
    (
        "seo run",
        "Runs a job with a TOML config: here the packaged `landing_to_parquet` with its `local` config, on 4 of its sample CSV files.",
        ["run", "landing_to_parquet", *sets("first")],
    ),
    (
        "seo run, again",
        "The same job on the same checkpoint once 4 more files landed: it writes only those.",
        ["run", "landing_to_parquet", *sets("second")],
    ),
    ("seo status", "The table at a glance.", ["status", TABLE]),
    ("seo status --json", "The same as one JSON document (schema: `docs/cli/schemas/status.json`).", ["--json", "status", TABLE]),
    ("seo log", "One line per batch.", ["log", TABLE]),
    ("seo log --kind commits --batch 1", "One log's record of one batch.", ["log", TABLE, "--kind", "commits", "--batch", "1"]),
    ("seo files --as-of 0", "The files a reader sees after batch 0.", ["files", TABLE, "--as-of", "0"]),
    ("seo read --limit 5", "Rows, as stored.", ["read", TABLE, "--limit", "5"]),
    ("seo verify", "The manifest and logs against storage.", ["verify", TABLE]),
    ("seo audit", "The exactly-once invariants, from each batch's ledger (offsets, rows, files, formats).", ["audit", TABLE]),
    (
        "seo compact --dry-run",
        "What compaction would rewrite (`--min-age 0s`: nothing reads this table as a stream).",
        ["compact", TABLE, "--dry-run", "--min-age", "0s", "--min-files", "2"],
    ),
    ("seo compact", "The rewrite, published at the table's next compaction batch.", ["compact", TABLE, "--min-age", "0s", "--min-files", "2"]),
    ("seo log, after compact", "Compaction's batches marked.", ["log", TABLE]),
    ("seo gc --dry-run", "What gc would delete, and what it keeps.", ["gc", TABLE, "--dry-run"]),
    ("seo gc", "Deletes what is collectable now.", ["gc", TABLE, "--older-than", "0s"]),
    ("seo index", "The Parquet index of the compact manifest files.", ["index", TABLE]),
    ("seo recover", "Finishes a pending commit; here there is none.", ["recover", TABLE]),
    ("an error", "One line on stderr and a non-zero exit code.", ["status", f"{WORK}/nothing-here"]),
]

#: what differs from run to run, in the order ``shape`` replaces it
VOLATILE: list[tuple[str, str]] = [
    (r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>"),
    (r"\b[0-9a-f]{8}\b", "<id>"),
    (r"\d+(\.\d+)?", "0"),
    (r"-{2,}", "--"),
    (r"[ \t]+", " "),
]


def shape(text: str) -> str:
    """``text`` without what differs between runs: ids, numbers, and the widths they give columns;
    of ``seo read``'s rows only the header and the count (Spark orders rows of one task's input
    files as it lists them)."""
    text = re.sub(r"(\$ seo read [^\n]*\n[^\n]*\n[^\n]*\n)(?:[^\n]*\n)*?(\d+ of \d+ rows\n)", r"\1\2", text)
    for pattern, stand_in in VOLATILE:
        text = re.sub(pattern, stand_in, text)
    return "\n".join(line.rstrip() for line in text.splitlines())


def seo(args: list[str]) -> tuple[int, str]:
    """``seo ARGS`` in a new process, as a user runs it: (exit code, what it printed). Spark's
    own log lines on stderr are left out of ``seo run``'s output."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    code = "import sys; from streaming_exactly_once.cli.main import main; sys.argv[0] = 'seo'; main()"
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=WORK, timeout=600)
    printed = done.stdout if args[0] == "run" else done.stdout + done.stderr
    return done.returncode, printed.replace(f"{REPO}/", "")


def page() -> str:
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    # two runs of four files each: which files make a batch does not depend on their times
    for number, path in enumerate(sorted(SAMPLES.glob("*.csv"))):
        (WORK / ("first" if number < 4 else "second")).mkdir(exist_ok=True)
        shutil.copyfile(path, WORK / ("first" if number < 4 else "second") / path.name)
    parts = [
        "# CLI examples\n",
        "Every command run for real, in this order, on one table. "
        "`docs/cli/generate_examples.py` writes this page and the tests check it against "
        "a new run, so it shows what the commands print now.\n",
    ]
    for heading, what, args in STEPS:
        code, out = seo(args)
        shown = " ".join(args).replace(" --set ", " \\\n    --set ")
        parts.append(f"## {heading}\n\n{what}\n\n```console\n$ seo {shown}\n{out.rstrip()}\n```\n")
        if code:
            parts.append(f"Exit code {code}.\n")
    return "\n".join(parts)


def main() -> int:
    text = page()
    if "--check" in sys.argv:
        return 0 if shape(PAGE.read_text()) == shape(text) else 1
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
