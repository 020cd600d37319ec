"""Every saved reproducer of a finding (``tests/explorer/regressions``), replayed on real Spark.

A fixed finding's program must pass. An open one (its fix not landed yet) must still fail, as an
expected failure: once it passes, the test says so, and its file is marked fixed (``"open":
false``). The open ones run in ``make test-long``, and so do the slowest fixed ones (``"long"``:
why, e.g. the test in ``make test`` that proves the library's fix).
"""

from __future__ import annotations

import pytest

from tests.explorer import regressions
from tests.explorer.interpreter import Interpreter

pytestmark = pytest.mark.spark


def _params() -> list:
    out = []
    for path in regressions.saved():
        data, _program = regressions.load(path)
        marks = [pytest.mark.long, pytest.mark.xfail(strict=True, reason=f"open finding {data['finding']}: {data['title']}")] if data["open"] else []
        if data.get("long") and not data["open"]:
            marks = [pytest.mark.long]
        out.append(pytest.param(path, id=path.stem, marks=marks))
    return out


@pytest.mark.parametrize("path", _params())
def test_saved_program_passes(spark, tmp_path, path):
    data, program = regressions.load(path)
    result = Interpreter(program, spark, tmp_path).execute()
    if result.inconclusive and not data["open"]:  # the machine's failure, not the library's
        pytest.skip(f"inconclusive: {result.failures[0].describe()}")
    assert result.ok, "\n".join([program.listing(), *result.transcript, *(f.describe() for f in result.failures)])
