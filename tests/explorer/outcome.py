"""What a run or a command ended with, as one word: ``ok``, the library error class that refused
it (``OffsetGapError``, ``SchemaMismatchError``, ...), or ``error:<first line>`` for anything else.

The explorer compares that word with what the model allows (``Expectation``): a refusal the docs
promise is fine, any other refusal is a finding, and so is a promised refusal that did not come.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import streaming_exactly_once.errors as errors_module

#: every error class of the library, longest name first (a subclass's name may contain its base's)
LIBRARY_ERRORS = sorted(
    (
        name
        for name, obj in vars(errors_module).items()
        if isinstance(obj, type) and issubclass(obj, errors_module.ExactlyOnceError) and name != "ExactlyOnceError"
    ),
    key=len,
    reverse=True,
)
#: refusals raised by the test doubles: an injected storage failure, the Kafka stand-in's data loss
OTHER = {"InjectedFailure": "InjectedFailure", "failOnDataLoss=true)": "DataLoss"}
#: the text of an injected storage failure (``testing.faults``): a library error may carry it as
#: its cause - an Iceberg commit's, which says the batch stays pending
INJECTED = "injected failure at "
#: failures of the machine, not of the library: Spark's Python worker not starting within its fixed
#: 10 s on an overloaded machine. A run that ends so is a failed run (nothing was promised).
ENVIRONMENT = {
    "Timed out while waiting for the Python worker to connect back": "env:python-worker-timeout",
    "Python worker failed to connect back": "env:python-worker-timeout",
    "CANNOT_OPEN_SOCKET": "env:python-socket-timeout",
}


def classify(error: BaseException | str | None) -> str:
    if error is None:
        return "ok"
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    if INJECTED in text:  # the test's own failure, whatever error of the library carries it
        return "InjectedFailure"
    found = []
    for name in LIBRARY_ERRORS:
        match = re.search(rf"\b{name}\b", text)
        if match:
            found.append((match.start(), name))
    for needle, name in ENVIRONMENT.items():
        if needle in text:
            return name
    for needle, name in OTHER.items():
        pos = text.find(needle)
        if pos >= 0:
            found.append((pos, name))
    if found:
        return min(found)[1]
    first = text.strip().splitlines()[0] if text.strip() else "?"
    return "error:" + first[:160]


@dataclass
class Expectation:
    """The outcomes the model allows for one action, and why a refusal is allowed."""

    allowed: set[str] = field(default_factory=lambda: {"ok"})
    reasons: list[str] = field(default_factory=list)

    def refuse(self, *names: str, reason: str, only: bool = True) -> None:
        """The action must (``only``) or may be refused with one of ``names``."""
        if only:
            self.allowed.discard("ok")
        self.allowed |= set(names)
        self.reasons.append(reason)

    def admits(self, outcome: str) -> bool:
        return outcome in self.allowed or outcome.startswith("env:")

    @property
    def must_refuse(self) -> bool:
        return "ok" not in self.allowed
