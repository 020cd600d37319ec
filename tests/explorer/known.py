"""Open findings the explorer already knows: a long run counts a failure that matches one as
*known* (it does not shrink it again). An entry goes when its fix lands; the saved regression
program of a finding (``tests/explorer/regressions``) then passes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from tests.explorer.model import Failure
from tests.explorer.program import Setup


@dataclass(frozen=True)
class Known:
    id: str
    title: str
    kind: str  # a failure kind (``Failure.kind``)
    detail: str  # a regular expression its detail matches
    setup: Callable[[Setup], bool] = lambda s: True
    reader: str = ""  # a regular expression the failure's reader matches

    def matches(self, failure: Failure, setup: Setup) -> bool:
        return (
            failure.kind == self.kind
            and re.search(self.detail, failure.detail) is not None
            and re.search(self.reader, failure.reader) is not None
            and self.setup(setup)
        )


KNOWN: list[Known] = [
    Known(
        "X03",
        "a downstream readStream of a partitioned Iceberg table: Spark refuses it at load (CONFLICTING_DIRECTORY_STRUCTURES), "
        "a stated limit (docs/iceberg.md): the generator asks for none, a saved program still shows it",
        "downstream-error",
        r"CONFLICTING_DIRECTORY_STRUCTURES",
        lambda s: "iceberg" in s.format,  # partitioned by the setup, or by an option set before the first batch
    ),
]


def known(failure: Failure, setup: Setup) -> Known | None:
    for k in KNOWN:
        if k.matches(failure, setup):
            return k
    return None
