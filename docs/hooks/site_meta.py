"""MkDocs hook: the header shows the package's version and, once the project has a public
address, a link to its repository.

The version is setup.cfg's (the one the wheel gets). The repository is, in this order: the
``SEO_DOCS_REPO_URL`` environment variable, setup.cfg's ``project_urls`` ``Source`` line, or the
clone's ``origin`` remote when it is a web address - so a site built from a clone links to where
it was cloned from, and one set place changes every build.
"""

from __future__ import annotations

import configparser
import os
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _metadata() -> configparser.SectionProxy:
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    return parser["metadata"]


def repository_url() -> str | None:
    if os.environ.get("SEO_DOCS_REPO_URL"):
        return os.environ["SEO_DOCS_REPO_URL"]
    for line in _metadata().get("project_urls", "").splitlines():
        name, _, url = line.partition("=")
        if name.strip().lower() == "source" and url.strip():
            return url.strip()
    try:
        origin = subprocess.run(["git", "remote", "get-url", "origin"], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return origin if origin.startswith("https://") else None


def on_config(config: Any, **kwargs: Any) -> Any:
    meta = _metadata()
    version = meta["version"]
    config["site_name"] = f"{meta['name']} {version}"
    config["copyright"] = f"{meta['name']} {version} · {meta.get('license', '')}".rstrip(" ·")
    url = repository_url()
    if url and not config.get("repo_url"):
        config["repo_url"] = url
        config["repo_name"] = meta["name"]
    return config
