"""A writer's work off the commit path: syncing and deleting claims, staging leftovers, log
retention, manifest indexes, the next compact files."""
