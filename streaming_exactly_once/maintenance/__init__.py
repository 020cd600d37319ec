"""Maintenance of a table without a running query: verify, recover, repair logs, collect garbage, status."""
