"""The commit protocol: a batch's steps, claimed in a write-ahead log entry, run, and rolled
forward or discarded by recovery; fenced by the lease's epochs."""
