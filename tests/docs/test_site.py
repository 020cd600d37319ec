"""The documentation site: a strict MkDocs build, every page opened in a real headless Chromium
(it renders, its title and content are there, no internal link is broken), and the options
reference has a meaning for every option."""

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


def test_every_option_has_a_meaning_in_the_reference():
    sys.path.insert(0, str(REPO / "docs" / "hooks"))
    try:
        from options_table import declared_options
    finally:
        sys.path.pop(0)
    for kind in ("sink", "group"):
        rows = declared_options(kind)
        assert rows and all(meaning for _, _, _, meaning in rows), [name for name, _, _, meaning in rows if not meaning]


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


def _render(url: str, profile: str, screenshot: Path | None = None) -> str:
    args = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=3000"]
    if screenshot is not None:
        args += [f"--screenshot={screenshot}", "--window-size=1280,1600", url]
        subprocess.run(args, capture_output=True, timeout=60, check=False)
        return ""
    done = subprocess.run([*args, "--dump-dom", url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_every_page_renders_in_chromium_without_broken_links(site, server, tmp_path):
    if chromium() is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; make test installs it)")
    import urllib.request

    checked: dict[str, int] = {}
    for page in _pages(site):
        url = urljoin(server, page.removesuffix("index.html"))
        dom = _render(url, tempfile.mkdtemp(dir=tmp_path))
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
            _render(urljoin(server, page), tempfile.mkdtemp(dir=tmp_path), shot_dir / f"{page.strip('/') or 'index'}.png")
