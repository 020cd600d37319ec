"""Fixtures of the Iceberg tests: a real PostgreSQL server (once per session), and the SQL
catalogs the tests run against - SQLite in a file, or a database on that server."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("pyiceberg")

_names = itertools.count()


@pytest.fixture(scope="session")
def postgres_server():
    from tests.iceberg import postgres

    server = postgres.start()
    if isinstance(server, str):
        pytest.skip(f"no PostgreSQL server for the catalog tests: {server}")
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_catalog(request, tmp_path):
    """``(catalog name, properties)`` of a fresh SQL catalog: its own name, so tests never share tables."""
    name = f"cat{next(_names)}"
    if request.param == "sqlite":
        uri = f"sqlite:///{tmp_path}/catalog.db"
    else:
        uri = request.getfixturevalue("postgres_server").uri
    props = {"type": "sql", "uri": uri}
    from pyiceberg.catalog import load_catalog

    load_catalog(name, **props).create_tables()  # before writers race to create them
    return name, props
