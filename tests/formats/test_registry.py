"""The table formats behind one seam: every format of a table answers the same questions the same
way (``formats.base.TableFormat``), opened from the registry, which names a missing extra and
imports a format's packages only when a table of that format is opened."""

from __future__ import annotations

import subprocess
import sys

import pytest

from streaming_exactly_once.errors import MissingDependencyError
from streaming_exactly_once.formats.registry import FORMATS, formats_of
from streaming_exactly_once.table.identity import read_identity
from tests.delta.helpers import commit_batch
from tests.iceberg.table_helpers import Q, iceberg_committer, ids_of


@pytest.fixture(scope="module")
def both_formats(tmp_path_factory):
    """A ``format=["delta", "iceberg"]`` table of two batches, committed without Spark."""
    from streaming_exactly_once.storage import open_storage

    storage = open_storage(str(tmp_path_factory.mktemp("formats") / "t"))
    committer = iceberg_committer(storage, delta=True)
    for batch in range(2):
        commit_batch(committer, Q, batch, ids_of(batch))
    committer.close()
    return storage


def test_a_table_of_both_formats_has_both_in_commit_order(both_formats):
    assert [spec.name for spec in formats_of(read_identity(both_formats))] == ["delta", "iceberg"]


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_each_format_holds_every_batch_and_reads_the_manifests_files(both_formats, name):
    from streaming_exactly_once.table.table_logs import open_manifest

    identity = read_identity(both_formats)
    table = FORMATS[name].open(both_formats, identity)
    manifest = open_manifest(both_formats, identity)
    committed = {e.path.rsplit("/t/", 1)[-1] for b in (0, 1) for e in manifest.get(b) or []}
    assert table.applied_batch() == 1
    assert {f.path for f in table.live_files()} == committed
    assert all(f.size == both_formats.info(f.path).size and f.rows in (2, None) for f in table.live_files())  # rows: where the format keeps them
    assert committed <= table.referenced_files()
    assert table.status()["appId"] == table.app_id
    assert isinstance(table.damaged(OSError("gone")), FORMATS[name].error)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_a_format_whose_extra_is_missing_is_refused_with_the_install_line(both_formats, monkeypatch, name):
    package = {"delta": "deltalake", "iceberg": "pyiceberg"}[name]
    monkeypatch.setitem(sys.modules, package, None)  # what Python does for a package that is not installed
    with pytest.raises(MissingDependencyError) as refused:
        FORMATS[name].open(both_formats, read_identity(both_formats))
    assert f"streaming-exactly-once[{name}]" in str(refused.value)


def test_the_registry_imports_no_format_package_until_a_table_is_opened():
    code = "import sys; import streaming_exactly_once.formats.registry; print(sorted(m for m in ('deltalake', 'pyiceberg') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
