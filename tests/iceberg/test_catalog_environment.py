"""``seo`` on an Iceberg table in a catalog this environment has no configuration of: the table is
not broken, so the commands say what to configure and exit 4 (as for a missing extra), touching
nothing - and a catalog that is configured but wrong is still a broken table (exit 1)."""

from __future__ import annotations

import json

import pytest

from streaming_exactly_once.iceberg.settings import IcebergCatalogRef
from streaming_exactly_once.storage import open_storage
from tests.commit.power_cut_runs import seo
from tests.iceberg.test_compact_command import iceberg_table
from tests.torture.matrix_checks import snapshot


def configure(monkeypatch, name, props):
    from pyiceberg.utils.config import Config

    for key, value in props.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__{name.upper()}__{key.upper()}", value)
    monkeypatch.setattr("pyiceberg.catalog._ENV_CONFIG", Config())  # pyiceberg reads it at import, as a new `seo` would


@pytest.mark.parametrize("sql_catalog", ["sqlite"], indirect=True)
def test_an_unconfigured_catalog_is_told_apart_from_a_broken_table(tmp_path, sql_catalog, monkeypatch):
    name, props = sql_catalog
    root = tmp_path / "t"
    iceberg_table(root, batches=2, iceberg_catalog=IcebergCatalogRef(name, "db.events"), iceberg_catalog_properties=tuple(sorted(props.items())))
    before = snapshot(open_storage(str(root)))
    variable = f"PYICEBERG_CATALOG__{name.upper()}__TYPE"

    code, out = seo("--json", "status", str(root))
    assert code == 0, out
    side = json.loads(out)["iceberg"]
    assert side["missingCatalog"] == name and variable in side["error"], side
    code, out = seo("status", str(root))
    assert f"not checked: Iceberg catalog {name!r} (table db.events of " in out and "is not configured in this environment" in out
    for command in (["verify"], ["audit"], ["recover"], ["gc", "--older-than", "0s"], ["compact", "--min-age", "0s"]):
        code, out = seo(*command, str(root))
        assert code == 4, (command, out)
        assert out.startswith(f"error: Iceberg catalog {name!r}") and variable in out and "Nothing was read or changed" in out, out
    assert snapshot(open_storage(str(root))) == before

    configure(monkeypatch, name, {**props, "uri": f"sqlite:///{tmp_path}/elsewhere.db"})  # configured, but wrong
    code, out = seo("--json", "verify", str(root))
    assert code == 1 and "iceberg-unreadable" in out, out
    configure(monkeypatch, name, props)
    code, out = seo("--json", "verify", str(root))
    assert code == 0 and json.loads(out)["problems"] == [], out
