"""The bounded slice of the scenario explorer for ``make test``: a few fixed seeds of the slice
profile (Parquet, JSON and Delta tables; files, the Kafka-like source, rate and their unions;
lost checkpoints, replays, injected failures, option and schema changes, maintenance commands,
a downstream ``readStream``), each program checked after every step by every reader. The long
run is ``make explore ARGS="--programs 2000"`` (``tests.explorer.run``).
"""

from __future__ import annotations

import pytest

from tests.explorer.generate import SLICE, generate
from tests.explorer.interpreter import Interpreter

pytestmark = pytest.mark.spark

#: chosen for what they cover (see each program's listing: ``python -m tests.explorer.run --show SEED --profile slice``)
SEEDS = [68, 92, 245, 297]


@pytest.mark.parametrize("seed", SEEDS)
def test_explorer_slice(spark, tmp_path, seed):
    program = generate(seed, SLICE)
    result = Interpreter(program, spark, tmp_path).execute()
    assert result.ok, "\n".join([program.listing(), *result.transcript, *(f.describe() for f in result.failures)])
