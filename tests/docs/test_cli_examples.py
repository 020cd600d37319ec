"""The CLI examples page shows what every ``seo`` command prints now: a new run of its generator
(real ``seo`` processes on a table ``seo run`` writes with Spark) gives the same page, up to the
ids, times and sizes that differ from run to run."""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path

import pytest

from streaming_exactly_once.cli.main import cli

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.spark


def _generator():
    spec = importlib.util.spec_from_file_location("generate_examples", REPO / "docs" / "cli" / "generate_examples.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_examples_page_is_what_the_commands_print_now():
    generator = _generator()
    page = generator.PAGE.read_text()
    for name in cli.commands:
        assert f"\n$ seo {name} " in page or f"\n$ seo --json {name} " in page, f"seo {name} has no example"
    now = generator.page()
    diff = "\n".join(difflib.unified_diff(generator.shape(page).splitlines(), generator.shape(now).splitlines(), lineterm="", n=1))
    assert not diff, f"the commands print otherwise now; run python docs/cli/generate_examples.py\n{diff}"


def test_the_shape_of_an_output_is_what_does_not_change_between_runs():
    shape = _generator().shape
    assert shape("batch     0  rows  500  commit   319.6 ms  77da9e98") == shape("batch     1  rows  1500  commit    57.3 ms  0a1b2c3d")
    assert shape("latest batch 3") != shape("last batch 3")
    assert shape("error: No table at x") != shape("error: no table at x")
    read = "$ seo read t --limit 1\nid  name\n--  ----\n{row}\n1 of 9 rows\n"
    assert shape(read.format(row="1   a")) == shape(read.format(row="7   b")) != shape(read.replace("name", "nom"))
