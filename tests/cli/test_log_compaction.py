"""``seo log`` marks what compaction did in each batch: ``.compact`` manifest files, rewrites of
small files (how many replaced, how many new), and the batches ``seo compact`` committed."""

from __future__ import annotations

import json

from streaming_exactly_once.log.compaction import is_compaction_batch
from tests.commit.power_cut_runs import seo
from tests.maintenance.test_compact import POLICY_ARGS, table_of


def test_seo_log_marks_compaction_batches(tmp_path):
    root = tmp_path / "t"
    table_of(root)  # batches 0-6 of 2 files each, compact interval 5: batch 4 is a .compact file
    code, out = seo("--json", "compact", *POLICY_ARGS, str(root))
    assert code == 0, out
    ran = json.loads(out)["batches"]
    published = ran[-1]  # the batch that published the rewrite; any before it are empty
    code, out = seo("--json", "log", str(root))
    assert code == 0, out
    history = {b["batchId"]: b for b in json.loads(out)}
    assert [b for b, h in history.items() if h["compactFile"]] == [b for b in history if is_compaction_batch(b, 5)]
    assert history[published]["replacedFiles"] == 14 and history[published]["rewrittenFiles"] == 1
    assert all(h["replacedFiles"] == h["rewrittenFiles"] == 0 for b, h in history.items() if b != published)
    code, text = seo("log", str(root))
    notes = {line.split()[0]: line.rstrip() for line in text.splitlines() if line[:1].isdigit()}
    assert notes[str(published)].endswith("seo compact, 14 files -> 1, .compact file"), notes
    assert all(notes[str(b)].endswith("seo compact (empty)") for b in ran[:-1])
    assert notes["4"].endswith("  .compact file") and notes["3"].endswith("  -")
