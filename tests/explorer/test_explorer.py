"""The bounded slice of the scenario explorer for ``make test``: a few programs of the slice
profile (no kills, no idle periods; Parquet, JSON and Delta tables), each checked after every
step by every reader. They were generated from seeds (``python -m tests.explorer.run --show
SEED --profile slice`` at the time) and are kept as JSON in ``tests/explorer/slice/`` so that a
change to the generator does not change them. Together they cover files, the Kafka stand-in and
rate in unions; single tables and dataset groups (row quarantine, a gate under both policies);
compaction with a registered and an unregistered downstream ``readStream``; schema additions and
widenings; lost checkpoints, replays, injected failures, option changes and maintenance commands.
The long run is ``make explore ARGS="--programs 2000 --jobs 2 --guided"`` (``tests.explorer.run``).
A program whose runs keep failing because Spark's Python workers cannot start within their fixed
10 s (an overloaded machine) is inconclusive: the test skips and says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.explorer.interpreter import Interpreter
from tests.explorer.program import Program

pytestmark = pytest.mark.spark

SLICE = sorted((Path(__file__).resolve().parent / "slice").glob("*.json"))


@pytest.mark.parametrize("path", SLICE, ids=lambda p: p.stem)
def test_explorer_slice(spark, tmp_path, path):
    import json

    program = Program.from_json(json.loads(path.read_text()))
    result = Interpreter(program, spark, tmp_path).execute()
    if result.inconclusive:  # the machine's failure, not the library's (ProgramResult.inconclusive)
        pytest.skip(f"inconclusive: {result.failures[0].describe()}")
    assert result.ok, "\n".join([program.listing(), *result.transcript, *(f.describe() for f in result.failures)])
