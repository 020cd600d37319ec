"""A dataset group's writer: one all-or-nothing commit per batch across the group's tables."""
