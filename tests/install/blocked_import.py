"""Run as ``python -m tests.install.blocked_import PACKAGE ROOT``: the library as it behaves where
the optional ``PACKAGE`` is not installed (a meta-path hook refuses to import it), without
uninstalling anything.

It imports every module of the library, commits two Parquet batches to a table at ``ROOT``
through the commit layer, reads them with pyarrow and pandas, and runs every ``seo`` command on
the table. It prints one JSON document: ``failures`` (what broke, each with the import chain
that reached ``PACKAGE``: which module of ours imported what, at which line) and ``rows`` (what
the readers saw). A module may need ``PACKAGE`` only if its own source imports it at the top:
that module is the feature's, reached only where the feature is used.
"""

from __future__ import annotations

import ast
import importlib
import io
import json
import pkgutil
import sys
import traceback
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

LIBRARY = "streaming_exactly_once"


class Blocker:
    """Refuses ``package`` as if it were not installed, and records who asked for it."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.chains: list[str] = []

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == self.package or name.startswith(self.package + "."):
            chain = import_chain(name)
            self.chains.append(chain)
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: {chain})", name=name)
        return None


def import_chain(name: str) -> str:
    """Our frames on the stack, outermost first: ``a.b:12 -> c.d:40 -> name``."""
    here = Path(__file__).resolve()
    steps = []
    for frame in traceback.extract_stack()[:-2]:
        path = Path(frame.filename).resolve()
        if path == here or LIBRARY not in path.parts:
            continue
        parts = path.with_suffix("").parts
        module = ".".join(parts[len(parts) - 1 - parts[::-1].index(LIBRARY) :]).removesuffix(".__init__")
        steps.append(f"{module}:{frame.lineno}")
    return " -> ".join([*steps, name])


def imports_at_top(module: str, package: str) -> bool:
    """Does the module's own source import ``package`` outside any function (it is the feature's)?"""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    for node in tree.body:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        if any(n == package or n.startswith(package + ".") for n in names):
            return True
    return False


def import_everything(blocker: Blocker, failures: list[str]) -> None:
    package = importlib.import_module(LIBRARY)
    for info in pkgutil.walk_packages(package.__path__, LIBRARY + "."):
        if info.name.startswith(LIBRARY + ".testing"):
            continue
        del blocker.chains[:]
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] != blocker.package or not blocker.chains:
                raise
            if not imports_at_top(info.name, blocker.package):
                failures.append(f"import {info.name}: {blocker.chains[0]}")


def commit_parquet(root: str) -> None:
    """Two batches of Parquet through the commit layer, staged as the sink stages them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from streaming_exactly_once.checkpoint.reader import InputFile
    from streaming_exactly_once.commit.committer import CommitterOptions, StagedFile, TableCommitter
    from streaming_exactly_once.storage import open_storage

    committer = TableCommitter(open_storage(root), CommitterOptions(heartbeat=False))
    committer.ensure_open()
    schema = json.dumps({"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]})
    for batch in range(2):
        with committer.batch("q0000000-0000-0000-0000-000000000000", batch, mode="rename") as attempt:
            staged = f"{attempt.staging_dir}/data/part-{batch}.parquet"
            buf = io.BytesIO()
            pq.write_table(pa.table({"id": pa.array([batch * 10 + i for i in range(10)], pa.int64())}), buf)
            committer.storage.put_if_absent(staged, buf.getvalue())
            info = committer.storage.info(staged)
            files = [StagedFile(final=f"part-{batch}.parquet", size=info.size, mtime_ms=info.mtime_ms, staged=staged)]
            inputs = [InputFile(source=0, path=f"file:///in/{batch}.csv", timestamp=1)]
            committer.commit(attempt, files, input_files=inputs, num_rows=10, schema=schema)
    committer.close()


def seo(*args: str) -> tuple[int, str]:
    from streaming_exactly_once.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue() + err.getvalue()


def run(package: str, root: str) -> dict[str, object]:
    blocker = Blocker(package)
    sys.meta_path.insert(0, blocker)
    failures: list[str] = []
    rows: dict[str, list[int]] = {}
    import_everything(blocker, failures)
    steps = [
        ("commit two Parquet batches", lambda: commit_parquet(root)),
        ("read.arrow", lambda: rows.__setitem__("arrow", sorted(read().arrow(root).column("id").to_pylist()))),
        ("read.pandas", lambda: rows.__setitem__("pandas", sorted(read().pandas(root)["id"].tolist()))),
    ]
    for name, step in steps:
        del blocker.chains[:]
        try:
            step()
        except Exception as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}" + (f" [{blocker.chains[0]}]" if blocker.chains else ""))
    commands = [
        ["status", root],
        ["log", root],
        ["files", root],
        ["verify", root],
        ["read", root],
        ["index", root],
        ["gc", "--dry-run", root],
        ["compact", "--dry-run", root],
        ["recover", root],
    ]
    for command in commands:
        del blocker.chains[:]
        code, output = seo(*command)
        if code != 0 or blocker.chains:
            failures.append(f"seo {' '.join(command)}: exit {code}: {output.strip()[-600:]}" + (f" [{blocker.chains[0]}]" if blocker.chains else ""))
    return {"failures": failures, "rows": rows}


def read():  # the readers module, imported once the blocker is in place
    from streaming_exactly_once import read as readers

    return readers


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], sys.argv[2])))
