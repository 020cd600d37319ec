"""The pages read without scrolling sideways and every page can be found: code in the Markdown
fits in 100 columns (the site's code column; test_site checks the rendering), every page is in
the navigation, and the home page links every page of the navigation's top level."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
WIDTH = 100
#: generated from real runs (docs/cli/generate_examples.py): its commands fit, the output is as printed
AS_PRINTED = DOCS / "cli-examples.md"


def _code_lines(path: Path) -> list[tuple[int, str]]:
    lines, inside = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside and (path != AS_PRINTED or line.startswith(("$ ", "    --"))):
            lines.append((number, line))
    return lines


def _pages() -> list[Path]:
    excluded = ("examples", "hooks", "overrides")
    return sorted(p for p in DOCS.rglob("*.md") if p.relative_to(DOCS).parts[0] not in excluded)


def test_code_fits_in_100_columns():
    wide = [
        f"{path.relative_to(REPO)}:{number} ({len(line)})"
        for path in [REPO / "README.md", *_pages()]
        for number, line in _code_lines(path)
        if len(line) > WIDTH
    ]
    wide += [
        f"{path.relative_to(REPO)}:{number} ({len(line)})"
        for path in sorted((DOCS / "examples").iterdir())
        if path.suffix in (".py", ".sh")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if len(line) > WIDTH
    ]
    assert wide == [], f"code lines wider than {WIDTH} columns scroll sideways on the site: {wide}"


def _nav_pages(nav) -> list[str]:
    found = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        found += _nav_pages(value) if isinstance(value, list) else [value]
    return found


def _nav():
    return yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]


def test_every_page_is_in_the_navigation():
    in_nav = set(_nav_pages(_nav()))
    missing = [str(p.relative_to(DOCS)) for p in _pages() if str(p.relative_to(DOCS)) not in in_nav]
    assert missing == []


def test_the_home_page_links_every_page_of_the_navigation():
    home = (DOCS / "index.md").read_text()
    linked = set(re.findall(r"\]\(([^)#]+\.md)", home))
    top = [_nav_pages([item])[0] for item in _nav()]
    assert [page for page in top if page != "index.md" and page not in linked] == []
