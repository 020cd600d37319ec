"""The documentation site: a strict MkDocs build, every page opened in a real headless Chromium
(it renders, its title and content are there, no internal link is broken), and the options
reference has a meaning for every option. One Chromium opens every page (``tests.docs.browser``)."""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

from tests.docs.browser import Browser

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="the docs tools come with the [docs] extra (make test installs it)")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-5000:]
    return out


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        if tag == "a" and values.get("href"):
            self.links.append(values["href"])
        if tag in ("img", "script") and values.get("src"):
            self.links.append(values["src"])


def _pages(site: Path) -> list[str]:
    return sorted(str(p.relative_to(site)) for p in site.rglob("index.html") if "assets" not in p.parts and p.parent.name != "404")


def test_strict_build_has_every_page(site):
    pages = _pages(site)
    for page in ("index.html", "getting-started/index.html", "operations/index.html", "design/commit-protocol/index.html", "api/index.html"):
        assert page in pages
    writing = (site / "writing" / "index.html").read_text()
    assert "lease_timeout" in writing and "connect_handover_wait" in writing and "<table>" in writing


def _options_hook():
    sys.path.insert(0, str(REPO / "docs" / "hooks"))
    try:
        import options_table
    finally:
        sys.path.pop(0)
    return options_table


def test_every_option_has_a_meaning_in_the_reference():
    declared_options = _options_hook().declared_options
    for kind in ("sink", "group"):
        rows = declared_options(kind)
        assert rows and all(meaning for _, _, _, meaning in rows), [name for name, _, _, meaning in rows if not meaning]


class _Text(HTMLParser):
    """The text a reader sees, with the text of each table cell of class ``seo-options`` tables."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.rows: list[list[str]] = []
        self._depth = 0  # inside a seo-options block
        self._skip = 0  # inside <script>/<style>

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        if tag == "div" and "seo-options" in (dict(attrs).get("class") or ""):
            self._depth = 1
        elif tag == "div" and self._depth:
            self._depth += 1
        if self._depth and tag == "tr":
            self.rows.append([])
        if self._depth and tag == "td":
            self.rows[-1].append("")

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1
        if tag == "div" and self._depth:
            self._depth -= 1

    def handle_data(self, data):
        if self._skip:
            return
        self.text.append(data)
        if self._depth and self.rows and self.rows[-1]:
            self.rows[-1][-1] += data


def _seen(html: str) -> _Text:
    parser = _Text()
    parser.feed(html)
    return parser


ESCAPED_PIPE = "\\|"


def test_no_page_shows_a_markdown_escape(site):
    """A generated table's escaped pipe inside a code span shows as a literal backslash."""
    for page in _pages(site):
        text = "".join(_seen((site / page).read_text()).text)
        at = text.find(ESCAPED_PIPE)
        assert at < 0, f"{page}: {text[max(0, at - 80) : at + 80]!r}"


@pytest.mark.parametrize(("page", "kind"), [("writing", "sink"), ("datasets", "group")])
def test_the_options_table_shows_every_option_with_its_type(site, page, kind):
    rows = [[c.strip() for c in r] for r in _seen((site / page / "index.html").read_text()).rows if r]
    declared = _options_hook().declared_options(kind)
    assert len(rows) == len(declared)
    for cells, (name, annotation, default, _) in zip(rows, declared, strict=True):
        assert cells[0] == name + annotation, cells  # the name, then its type under it (<br>)
        assert cells[1] == default
        assert "\\" not in "".join(cells) and "Optional[" not in cells[0] and "typing." not in cells[0]


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One headless Chromium for the module's pages (``tests.docs.browser``)."""
    found = chromium()
    if found is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; make test installs it)")
    with Browser(found, CHROMIUM_FLAGS, str(tmp_path_factory.mktemp("chromium-profile"))) as opened:
        yield opened


def _screenshot(url: str, profile: str, screenshot: Path) -> None:
    args = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=3000"]
    subprocess.run([*args, f"--screenshot={screenshot}", "--window-size=1280,1600", url], capture_output=True, timeout=60, check=False)


#: Injected into a copy of a page: once it has loaded, what the layout did goes to ``data-probe``.
PROBE = """<script>
window.addEventListener("load", () => {
  const names = [...document.querySelectorAll(".seo-options td:first-child > code")];
  const blocks = [...document.querySelectorAll(".md-content pre > code")].filter(c => c.clientWidth > 0);
  document.body.setAttribute("data-probe", JSON.stringify({
    names: names.length,
    brokenNames: names.filter(c => c.getClientRects().length > 1).map(c => c.textContent),
    codeBlocks: blocks.length,
    clippedCode: blocks.filter(c => c.scrollWidth > c.clientWidth + 1)
      .map(c => c.textContent.split("\\n").reduce((a, b) => (b.length > a.length ? b : a), "")),
  }));
});
</script>"""


def _layout(site: Path, server: str, page: str, width: int, browser: Browser) -> dict:
    """What the layout of ``page`` (a directory of the site) looks like in a window ``width`` wide."""
    import json
    from html import unescape

    probe = site / page / "probe.html"
    probe.write_text((site / page / "index.html").read_text().replace("</body>", PROBE + "</body>"))
    dom = browser.dom(urljoin(server, f"{page}/probe.html"), width=width)
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, (page, dom[:2000])
    return json.loads(unescape(found.group(1)))


@pytest.mark.parametrize("width", [1280, 800])
def test_option_names_never_break_in_the_options_tables(site, server, browser, width):
    for page, kind in (("writing", "sink"), ("datasets", "group")):
        layout = _layout(site, server, page, width, browser)
        assert layout["names"] == len(_options_hook().declared_options(kind))
        assert layout["brokenNames"] == [], (page, width)


#: pages with code (the generated CLI output and the API reference print lines as they are)
CODE_PAGES = [
    "getting-started", "writing", "reading", "schema", "compaction", "delta", "iceberg", "datasets", "kafka",
    "operations", "migrating", "observability", "cli", "design/commit-protocol", "design/lease",
    "design/iceberg-format",
]  # fmt: skip


def test_no_code_block_scrolls_sideways_in_a_1280_pixel_window(site, server, browser):
    """Code of 100 columns (tests/docs/test_readable.py) fits the content column: without the
    site's wider grid and smaller code font, lines from about 83 columns scroll."""
    for page in CODE_PAGES:
        layout = _layout(site, server, page, 1280, browser)
        assert layout["codeBlocks"] > 0 and layout["clippedCode"] == [], (page, layout["clippedCode"])


def test_the_site_opened_as_a_file_says_how_to_get_search(site, server, browser):
    """From disk the search box is missing (browsers do not let the page load its index); the
    banner naming ``make docs-serve`` shows there, and only there."""
    as_file = browser.dom((site / "index.html").as_uri())
    served = browser.dom(server)
    assert re.search(r'<html[^>]*class="[^"]*seo-file', as_file) and "make docs-serve" in as_file
    assert 'class="md-search' in served and not re.search(r'<html[^>]*class="[^"]*seo-file', served)
    css = (site / "css" / "site.css").read_text()
    assert re.search(r"\.md-banner\s*\{\s*display:\s*none", css) and "html.seo-file .md-banner" in css
    assert "docs-serve:" in (REPO / "Makefile").read_text() and "make docs-serve" in (REPO / "README.md").read_text()


def test_the_header_shows_the_version_and_the_repository(site, monkeypatch):
    sys.path.insert(0, str(REPO / "docs" / "hooks"))
    try:
        import site_meta
    finally:
        sys.path.pop(0)
    version = site_meta._metadata()["version"]
    assert f"<title>Writing - streaming-exactly-once {version}</title>" in (site / "writing" / "index.html").read_text()
    monkeypatch.setenv("SEO_DOCS_REPO_URL", "https://git.example.org/seo")
    config = site_meta.on_config({"site_name": "x", "repo_url": None})
    assert config["repo_url"] == "https://git.example.org/seo" and config["repo_name"] == "streaming-exactly-once"


def test_every_page_renders_in_chromium_without_broken_links(site, server, browser, tmp_path):
    import urllib.request

    checked: dict[str, int] = {}
    for page in _pages(site):
        url = urljoin(server, page.removesuffix("index.html"))
        dom = browser.dom(url)
        title = re.search(r"<title>(.*?)</title>", dom, re.S)
        assert title and "streaming-exactly-once" in title.group(1), (page, dom[:500])
        assert re.search(r"<h1[^>]*>", dom), page
        assert 'class="md-content"' in dom and 'class="md-search' in dom, page  # Material's scripts ran: the search is built
        parser = _Links()
        parser.feed(dom)
        for link in parser.links:
            target = urljoin(url, link)
            if urlsplit(target).netloc != urlsplit(server).netloc:
                continue  # the site makes no external requests of its own; outside links are not fetched here
            target = target.split("#", 1)[0]
            if target not in checked:
                try:
                    checked[target] = urllib.request.urlopen(target, timeout=10).status
                except Exception as exc:  # noqa: BLE001 - reported below
                    checked[target] = getattr(exc, "code", 0)
            assert checked[target] == 200, f"{page}: broken link {link} -> {target} ({checked[target]})"
    assert len(checked) > 20
    if os.environ.get("SEO_DOCS_SCREENSHOTS"):
        shot_dir = Path(os.environ["SEO_DOCS_SCREENSHOTS"])
        shot_dir.mkdir(parents=True, exist_ok=True)
        for page in ("", "getting-started/", "writing/", "operations/"):
            _screenshot(urljoin(server, page), tempfile.mkdtemp(dir=tmp_path), shot_dir / f"{page.strip('/') or 'index'}.png")
