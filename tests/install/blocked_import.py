"""Run as ``python -m tests.install.blocked_import PACKAGE WORK``: the library as it behaves where
the optional ``PACKAGE`` is not installed (a meta-path hook refuses to import it), without
uninstalling anything.

The core: every module of the library imports, two Parquet batches commit (``WORK/parquet``)
through the commit layer, pyarrow and pandas read them, and every ``seo`` command works on the
table. A module may need ``PACKAGE`` only if its own source imports it at the top (it is the
feature's, reached only where the feature is used), or it is the Spark side (``SPARK_SIDE``).

The refusals: every way a user reaches a feature that needs ``PACKAGE`` (``extras.FEATURES``)
is a ``MissingDependencyError`` - a ``ConfigError`` - naming its ``pip install`` line, and a
refused sink wrote nothing; ``seo`` exits 4 with that line. ``WORK/delta`` and
``WORK/iceberg`` are tables the caller wrote with every package installed.

It prints one JSON document: ``failures`` (each with the import chain that reached
``PACKAGE``: which module of ours imported what, at which line), ``rows`` (what the readers
saw) and ``refused`` (the cases that were refused as they should be).
"""

from __future__ import annotations

import ast
import importlib
import io
import json
import pkgutil
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

LIBRARY = "streaming_exactly_once"
#: the modules that need pyspark: the sink and the job runner, which runs Spark jobs
SPARK_SIDE = (f"{LIBRARY}.sink", f"{LIBRARY}.cli.job_runner")


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
    for node in ast.parse(Path(spec.origin).read_text()).body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
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
            spark_side = blocker.package == "pyspark" and info.name.startswith(SPARK_SIDE)
            if not spark_side and not imports_at_top(info.name, blocker.package):
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
    from tests.install.smoke import seo as run_seo  # imported once the blocker is in place

    return run_seo(*args)


#: every seo command on a table, as the core runs them
COMMANDS = (["status"], ["log"], ["files"], ["verify"], ["read"], ["index"], ["gc", "--dry-run"], ["compact", "--dry-run"], ["recover"])


def check_core(blocker: Blocker, work: Path, failures: list[str]) -> dict[str, list[int]]:
    from streaming_exactly_once import read

    root = str(work / "parquet")
    rows: dict[str, list[int]] = {}
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("commit two Parquet batches", lambda: commit_parquet(root)),
        ("read.arrow", lambda: rows.__setitem__("arrow", sorted(read.arrow(root).column("id").to_pylist()))),
        ("read.pandas", lambda: rows.__setitem__("pandas", sorted(read.pandas(root)["id"].tolist()))),
    ]
    if blocker.package != "pyspark":  # the sinks of the core's formats build (nothing runs without a query)
        import streaming_exactly_once as seo_package

        for fmt in ("parquet", "json", "csv", "text", "orc"):
            steps.append((f"ExactlyOnceSink(format={fmt!r})", lambda f=fmt: seo_package.ExactlyOnceSink(str(work / f), format=f)))
        steps.append(("DatasetSink", lambda: seo_package.DatasetSink(str(work / "group"), outputs=[seo_package.Output("a")])))
    for name, step in steps:
        del blocker.chains[:]
        try:
            step()
        except Exception as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}" + (f" [{blocker.chains[0]}]" if blocker.chains else ""))
    for command in COMMANDS:
        del blocker.chains[:]
        code, output = seo(*command, root)
        if code != 0 or blocker.chains:
            failures.append(f"seo {' '.join(command)}: exit {code}: {output.strip()[-600:]}" + (f" [{blocker.chains[0]}]" if blocker.chains else ""))
    return rows


def refusal_cases(feature: str, work: Path) -> list[tuple[str, Callable[[], Any]]]:
    """Every way a user reaches ``feature`` (a key of ``extras.FEATURES``): each must be refused."""
    import streaming_exactly_once
    from streaming_exactly_once import read

    new = str(work / "new")  # no refused sink may create it
    parquet = str(work / "parquet")

    def sink(table: str, **options: Any) -> Callable[[], Any]:
        return lambda: streaming_exactly_once.ExactlyOnceSink(table, **options)

    def group(root: str, fmt: str = "parquet") -> Callable[[], Any]:
        return lambda: streaming_exactly_once.DatasetSink(root, outputs=[streaming_exactly_once.Output("a", format=fmt)])

    if feature in ("delta", "iceberg"):
        table = str(work / feature)
        snapshot = read.delta_version if feature == "delta" else read.iceberg_snapshot
        return [
            (f"ExactlyOnceSink(format={feature!r})", sink(new, format=feature)),
            ("ExactlyOnceSink(format='delta+iceberg')", sink(new, format="delta+iceberg")),
            (f"DatasetSink output of format={feature!r}", group(new, feature)),
            (f"read.{snapshot.__name__}", lambda: snapshot(table)),
            *[(f"seo {command[0]} on a {feature} table", seo_case(command, table)) for command in COMMANDS if command[0] in WITH_FORMAT],
            (f"seo status on a {feature} table", status_case(table)),
        ]
    if feature in ("s3", "azure", "gcs"):
        uri = {"s3": "s3://bucket/t", "azure": "abfss://c@account.dfs.core.windows.net/t", "gcs": "gs://bucket/t"}[feature]
        return [
            (f"ExactlyOnceSink({uri!r})", sink(uri)),
            (f"DatasetSink({uri!r})", group(uri)),
            (f"read.arrow({uri!r})", lambda: read.arrow(uri)),
            (f"seo status {uri}", seo_case(["status"], uri)),
        ]
    if feature in ("metrics", "lineage"):
        option = {"metrics": [("metrics", 9108), ("metrics", True)], "lineage": [("lineage", True), ("lineage", {"throttle": "1m"})]}[feature]
        return [(f"ExactlyOnceSink({key}={value!r})", sink(new, **{key: value})) for key, value in option] + [
            (f"DatasetSink({feature}=...)", lambda: streaming_exactly_once.DatasetSink(new, dataset_column="d", **{option[0][0]: option[0][1]}))
        ]
    if feature in ("polars", "duckdb"):
        return [(f"read.{feature}", lambda: getattr(read, feature)(parquet))]
    if feature == "spark":
        return [
            ("from streaming_exactly_once import ExactlyOnceSink", lambda: streaming_exactly_once.ExactlyOnceSink),
            ("from streaming_exactly_once import DatasetSink", lambda: streaming_exactly_once.DatasetSink),
            ("read.spark", lambda: read.spark(parquet, None)),
            ("seo run", seo_case(["run", "landing_to_parquet"], "--jobs-dir=/nonexistent")),
        ]
    return []


#: the seo commands that read or change a table's Delta or Iceberg side (``maintenance.table_extras``)
WITH_FORMAT = ("verify", "gc", "compact", "recover")


class Refused(Exception):
    """What a seo case returns instead of raising: its output, for the checks of a refusal."""


def seo_case(command: list[str], table: str) -> Callable[[], Any]:
    def run() -> None:
        code, output = seo(*command, table)
        raise Refused(code, output)

    return run


def status_case(table: str) -> Callable[[], Any]:
    def run() -> None:
        code, output = seo("status", table)
        raise Refused(4 if code == 0 and "not checked: " in output else code, output)

    return run


def check_refusals(blocker: Blocker, work: Path, failures: list[str]) -> list[str]:
    from streaming_exactly_once import extras
    from streaming_exactly_once.errors import ConfigError, MissingDependencyError

    refused = []
    features = [k for k, f in extras.FEATURES.items() if any(m.split(".")[0] == blocker.package for m in f.modules)]
    for feature in features:
        line = extras.install_line(extras.FEATURES[feature].extra)
        cases = refusal_cases(feature, work)
        if not cases:
            failures.append(f"feature {feature!r} (extras.FEATURES) has no refusal cases in {__name__}")
        for name, case in cases:
            del blocker.chains[:]
            try:
                case()
                failures.append(f"{name}: not refused without {blocker.package}")
                continue
            except Refused as exc:
                code, output = exc.args
                ok = code == 4 and line in output and "this is a bug" not in output
                problem = f"{name}: exit {code}, not 4 with {line!r}: {output.strip()[-400:]}"
            except MissingDependencyError as exc:
                ok = isinstance(exc, ConfigError) and line in str(exc)
                problem = f"{name}: {exc} (does not name {line!r})"
            except Exception as exc:
                ok, problem = False, f"{name}: {type(exc).__name__}: {exc}" + (f" [{blocker.chains[0]}]" if blocker.chains else "")
            if not ok:
                failures.append(problem)
            elif (work / "new").exists():
                failures.append(f"{name}: refused, but it wrote {work / 'new'}")
            else:
                refused.append(name)
    return refused


def run(package: str, work: Path) -> dict[str, object]:
    blocker = Blocker(package)
    sys.meta_path.insert(0, blocker)
    failures: list[str] = []
    import_everything(blocker, failures)
    rows = check_core(blocker, work, failures)
    refused = check_refusals(blocker, work, failures)
    return {"failures": failures, "rows": rows, "refused": refused}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], Path(sys.argv[2]))))
