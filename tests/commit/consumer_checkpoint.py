"""A downstream query's Spark checkpoint written by hand, as Spark writes it: what a registered
consumer (``compaction.consumers``) has read, planned and committed."""

from __future__ import annotations

import json
import time


def consumer_checkpoint(checkpoint, entries, *, later_ms: int = 3_600_000, source_id: int = 0, committed: bool = True) -> None:
    """A downstream query's checkpoint as Spark writes it: one more batch of the query in which
    file source ``source_id`` read ``entries`` and a file read ``later_ms`` after now that moves
    its horizon (``sources/<source_id>/N``), its offsets (every source's latest log offset) and,
    if ``committed``, its commit."""
    for d in ("offsets", "commits"):
        (checkpoint / d).mkdir(parents=True, exist_ok=True)
    source = checkpoint / "sources" / str(source_id)
    source.mkdir(parents=True, exist_ok=True)
    n = len(list(source.iterdir()))
    root = entries[0].path.rsplit("/", 2)[0] if entries else ""
    lines = [{"path": e.path.replace("file:///", "file:/"), "timestamp": e.modification_time, "batchId": n} for e in entries]
    lines.append({"path": f"{root}/p=a/later-{n}.parquet", "timestamp": int(time.time() * 1000) + later_ms, "batchId": n})
    (source / str(n)).write_text("\n".join(["v1", *(json.dumps(line) for line in lines)]))
    sources = sorted(int(d.name) for d in (checkpoint / "sources").iterdir())
    ends = [json.dumps({"logOffset": len(list((checkpoint / "sources" / str(i)).iterdir())) - 1}) for i in range(max(sources) + 1)]
    batch = len(list((checkpoint / "offsets").iterdir()))
    (checkpoint / "offsets" / str(batch)).write_text("\n".join(["v1", '{"batchWatermarkMs":0,"batchTimestampMs":0}', *ends]))
    if committed:
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
