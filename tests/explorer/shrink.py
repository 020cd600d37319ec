"""Shrinking a failing program to a short reproducer.

First the actions (delta debugging: drop chunks of the list, halves first, then smaller ones,
keeping any shorter program that still fails the same way), then the setup (each feature turned
to its plainest value: one source, Parquet, unpartitioned, no compaction, ...), then the action
list once more. "The same way" is the failure's signature with batch numbers and versions left
out (``normalized``): a reproducer may fail at another batch of the same reader.

Every candidate is a whole program run on real Spark, so the budget (candidates and seconds) is
what bounds the time; what was reached is kept.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import fields, replace

from tests.explorer.program import Program, Setup

#: the plainest value of each setup field, tried in this order
PLAIN: list[tuple[str, object]] = [
    ("downstream", None),
    ("foreign_files", False),
    ("compaction", False),
    ("query_id", False),
    ("filter", False),
    ("private_manifest", False),
    ("partitioned", False),
    ("staging", "rename"),
    ("attach", "start"),
    ("schema_evolution", "none"),
    ("fail_on_data_loss", False),
    ("format", "parquet"),
]


def normalized(signature: str | None) -> str | None:
    if signature is None:
        return None
    return re.sub(r"[=@ ]?\d+", "", signature)


def shrink(
    program: Program,
    signature: str,
    run: Callable[[Program], str | None],
    *,
    max_runs: int = 40,
    max_s: float = 1800.0,
    log: Callable[[str], None] = print,
) -> Program:
    """The shortest, plainest program found whose run fails with ``signature`` (``run`` returns
    a program's failure signature, None if it passed)."""
    want = normalized(signature)
    deadline = time.time() + max_s
    tries = 0

    def fails(candidate: Program) -> bool:
        nonlocal tries
        if tries >= max_runs or time.time() > deadline:
            return False
        tries += 1
        got = normalized(run(candidate))
        log(f"shrink try {tries}: {len(candidate.actions)} actions, {candidate.setup.describe()} -> {got}")
        return got == want

    current = _actions(program, fails)
    current = _setup(current, fails)
    current = _actions(current, fails)
    log(f"shrunk in {tries} runs: {len(program.actions)} -> {len(current.actions)} actions")
    return current


def _actions(program: Program, fails: Callable[[Program], bool]) -> Program:
    actions = list(program.actions)
    n = 2
    while len(actions) >= 2:
        size = max(1, len(actions) // n)
        chunks = [actions[i : i + size] for i in range(0, len(actions), size)]
        for i in range(len(chunks)):
            candidate = [a for j, c in enumerate(chunks) if j != i for a in c]
            if fails(program.with_actions(candidate)):
                actions = candidate
                n = max(n - 1, 2)
                break
        else:
            if size == 1:
                break
            n = min(n * 2, len(actions))
    return program.with_actions(actions)


def _setup(program: Program, fails: Callable[[Program], bool]) -> Program:
    current = program
    names = {f.name for f in fields(Setup)}
    for name, plain in PLAIN:
        if name in names and getattr(current.setup, name) != plain:
            candidate = replace(current, setup=replace(current.setup, **{name: plain}))
            if fails(candidate):
                current = candidate
    if len(current.setup.sources) > 1:
        for source in current.setup.sources:
            candidate = replace(current, setup=replace(current.setup, sources=(source,)))
            if fails(candidate):
                current = candidate
                break
    return current
