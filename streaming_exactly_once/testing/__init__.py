"""Test support shipped with the package (importable wherever a sink runs, e.g. a Spark Connect
server's Python worker). No production module imports it (an import-linter contract)."""
