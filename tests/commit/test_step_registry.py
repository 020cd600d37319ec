"""A WAL entry is read by processes that never wrote one (seo verify, gc, recover, the next
writer): each must know every step kind a claim may hold, whatever it imported before."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import streaming_exactly_once.commit as commit
from streaming_exactly_once.commit.protocol.step import CommitStep


def _declared_kinds() -> set[str]:
    """Every step kind a module of the commit layer declares."""
    kinds = set()
    for info in pkgutil.walk_packages(commit.__path__, "streaming_exactly_once.commit."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, CommitStep) and value.__module__ == module.__name__:
                kind = getattr(value, "kind", None)
                if isinstance(kind, str) and kind:
                    kinds.add(kind)
    return kinds


def test_reading_a_wal_entry_knows_every_step_kind_in_a_fresh_process():
    code = "import json, streaming_exactly_once.commit.protocol.sequence as s; print(json.dumps(sorted(s.REGISTRY)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    known = set(json.loads(out))
    assert _declared_kinds() <= known, f"step kinds a WAL reader does not know: {sorted(_declared_kinds() - known)}"
    assert "ledger" in known
