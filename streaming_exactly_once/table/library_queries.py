"""The query ids of batches the library commits on its own, with no stream data in them.

Every manifest batch is committed for a (query id, Spark batch id) pair (``table.commits_log``).
Two kinds of batch have no Spark query behind them, so they are recorded under fixed ids that no
Spark query has (Spark's ids are random UUIDs), each numbering its own batches from 0:

* ``MAINTENANCE_QUERY``: ``seo compact``'s batches (``maintenance.compact``);
* ``ADOPTION_QUERY``: the batch that adopts the files a table's directory held before its first
  batch (``adopt_existing_files``; ``commit.adoption``).
"""

from __future__ import annotations

MAINTENANCE_QUERY = "00000000-0000-0000-0000-00000000c0de"
ADOPTION_QUERY = "00000000-0000-0000-0000-00000000ad07"

#: each library query id, and what a person reads for it
LIBRARY_QUERIES: dict[str, str] = {MAINTENANCE_QUERY: "seo compact", ADOPTION_QUERY: "adoption"}

__all__ = ["ADOPTION_QUERY", "LIBRARY_QUERIES", "MAINTENANCE_QUERY"]
