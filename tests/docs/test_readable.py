"""The pages read without scrolling sideways and every page can be found: code in the Markdown
fits in 100 columns (the site's code column; test_site checks the rendering), every page is in
the navigation, and the home page links every page of the navigation's top level. The user pages
read in short steps: no paragraph or list item runs over 120 words."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
WIDTH = 100
#: generated from real runs (docs/cli/generate_examples.py): its commands fit, the output is as printed
AS_PRINTED = DOCS / "cli-examples.md"
#: the most words a paragraph or a list item of a user page may run
PARAGRAPH_WORDS = 120
#: not user pages: the design essays, and pages whose text is a generator's record of real runs
#: (docs/benchmarks.md is generated too, by benchmarks/report.py, and is held to the limit)
NOT_USER_PAGES = (DOCS / "design", AS_PRINTED, DOCS / "explorer-coverage.md")
LIST_ITEM = re.compile(r"\s*([-*+]|\d+[.)])\s")
#: lines that are not prose: headings, table rows, comments and snippet includes
NOT_PROSE = ("#", "|", "<!--", "--8<--")


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


def _paragraphs(path: Path) -> list[str]:
    """The page's paragraphs and list items (a continuation paragraph of an item counts on its
    own), each as one line; code blocks, tables and headings are not prose."""
    paragraphs, current, inside = [], [], False
    for line in [*path.read_text().splitlines(), ""]:
        text = line.strip()
        fence = text.startswith(("```", "~~~"))
        inside = inside != fence
        prose = bool(text) and not fence and not inside and not text.startswith(NOT_PROSE)
        if current and (not prose or LIST_ITEM.match(line)):
            paragraphs.append(" ".join(current))
            current = []
        if prose:
            current.append(text)
    return paragraphs


def _user_pages() -> list[Path]:
    return [p for p in _pages() if not any(p == x or x in p.parents for x in NOT_USER_PAGES)]


def test_paragraphs_of_the_user_pages_are_short():
    long = [
        f"{path.relative_to(REPO)}: {len(words)} words, '{' '.join(words[:8])} ...'"
        for path in _user_pages()
        for words in (paragraph.split() for paragraph in _paragraphs(path))
        if len(words) > PARAGRAPH_WORDS
    ]
    assert long == [], f"split these into paragraphs of at most {PARAGRAPH_WORDS} words, keeping every fact: {long}"
