"""``extras`` - the one declaration of which extra provides what - agrees with setup.cfg, which
is what pip installs: every extra it names exists, and installs the packages it says."""

from __future__ import annotations

import configparser
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

from streaming_exactly_once import extras

REPO = Path(__file__).resolve().parents[2]
#: setup.cfg's extras for the project's own work, not the library's features
DEVELOPMENT = {"test", "bench", "docs"}


def setup_extras() -> dict[str, set[str]]:
    """extra -> the distribution names it requires (lower case, ``-`` for ``_``)."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    out = {}
    for extra, text in config["options.extras_require"].items():
        lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
        out[extra] = {re.split(r"[\[<>=!~ ;]", line, maxsplit=1)[0].lower().replace("_", "-") for line in lines}
    return out


def test_the_documented_extras_are_setup_cfg_s():
    assert set(extras.EXTRAS) == set(setup_extras()) - DEVELOPMENT


def test_each_feature_s_extra_installs_its_modules():
    declared = setup_extras()
    providers = {name: {d.lower().replace("_", "-") for d in dists} for name, dists in packages_distributions().items()}
    for key, feature in extras.FEATURES.items():
        assert feature.extra in declared, key
        for module in feature.modules:
            top = module.split(".")[0]
            dists = providers.get(top, set())
            assert dists & declared[feature.extra], f"{key}: {module} comes from {dists or 'nothing installed'}, not from [{feature.extra}]"
            assert dists & declared["all"] or feature.extra == "delta-spark", f"{key}: [all] misses {module}"


def test_every_storage_scheme_names_a_storage_feature():
    for scheme, feature in extras.STORAGE.items():
        assert feature in extras.FEATURES and f"{scheme}://" in extras.FEATURES[feature].what + extras.EXTRAS[feature], scheme


def test_getting_started_shows_every_extra_with_its_size():
    sys.path.insert(0, str(REPO / "docs" / "hooks"))
    from extras_table import MARKER, extras_table

    assert MARKER in (REPO / "docs" / "getting-started.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in extras_table().splitlines()[2:]}
    assert list(rows) == list(extras.EXTRAS)
    for extra in ("spark", "arrow", "delta", "iceberg", "s3", "polars", "duckdb"):
        assert rows[extra].rstrip(" |").endswith("MB"), rows[extra]  # measured: installed where the docs build


def test_an_optional_package_missing_anywhere_in_seo_is_a_refusal_not_a_bug(monkeypatch, tmp_path, capsys):
    """The CLI's last line of defence: an import that escaped its feature's check still ends as the
    refusal (exit 4, the pip install line), never "this is a bug"."""
    import pytest

    from streaming_exactly_once.cli.main import main
    from streaming_exactly_once.maintenance import status

    def missing(storage):
        raise ModuleNotFoundError("No module named 'pyiceberg'", name="pyiceberg")

    (tmp_path / "_spark_metadata").mkdir()  # a table, as far as finding one goes
    monkeypatch.setattr(status, "table_status", missing)
    with pytest.raises(SystemExit) as exit_:
        main(["status", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 4 and "pip install 'streaming-exactly-once[iceberg]'" in err and "bug" not in err, err
    monkeypatch.setattr(status, "table_status", lambda storage: __import__("not_an_extra_package"))
    with pytest.raises(SystemExit) as exit_:
        main(["status", str(tmp_path)])
    assert exit_.value.code == 1 and "this is a bug" in capsys.readouterr().err  # anything else is still reported as one
