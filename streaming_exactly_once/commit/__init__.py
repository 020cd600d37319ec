"""The commit layer: each batch of a table or a dataset group published exactly once.

``committer`` (a table) and ``groups`` (a dataset group) are the writers, over ``writer``'s
lease, recovery and state. ``protocol`` is the write-ahead log and its steps (claim, run, roll
forward or discard); ``table_steps`` the steps a batch adds when its table asks for them (a
schema change, a Delta or Iceberg commit, the audit ledger); ``background`` the work a committed
batch leaves off its path; ``rewrites`` the compaction of small data files.
"""
