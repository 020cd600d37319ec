"""``seo gc`` says which files it keeps although the latest batch no longer lists them - files a
compaction replaced, which time travel still reads - and after which batch each becomes
collectable; the stream reaching that batch makes gc delete them, and not a batch earlier."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from streaming_exactly_once.manifest.manifest_log import ManifestLog
from streaming_exactly_once.storage import open_storage
from tests.commit.helpers import make_committer
from tests.commit.power_cut_runs import seo
from tests.delta.helpers import commit_batch
from tests.maintenance.test_compact import POLICY_ARGS, Q, ids_upto, read_ids, table_of

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "cli" / "schemas" / "gc.json"


def _listed(root, as_of=None) -> set[str]:
    return {e.uri for e in ManifestLog(open_storage(str(root))).files(as_of)}


def _gc(root, *args) -> dict:
    code, out = seo("--json", "gc", "--min-batches-to-retain", "3", *args, str(root))
    assert code == 0, out
    return json.loads(out)


def test_gc_names_the_replaced_files_it_keeps_and_the_batch_after_which_they_go(tmp_path):
    root = tmp_path / "t"
    table_of(root)  # batches 0-6 of 2 files each, compact interval 5
    code, out = seo("--json", "compact", *POLICY_ARGS, str(root))
    assert code == 0 and json.loads(out)["batches"] == [7, 8, 9], out  # published at batch 9
    replaced = _listed(root, as_of=8) - _listed(root)
    assert len(replaced) == 14

    report = _gc(root, "--dry-run")
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    (held,) = report["held"]
    assert held["reason"] == "time-travel" and held["newestBatch"] == 8, held
    assert {f["uri"] for f in held["files"]} == replaced and held["bytes"] == sum(f["size"] for f in held["files"])
    # log retention keeps batch 8's manifest file until a compact file after it covers the last
    # 3 batches and is not the newest but one: after batch 14 (log.compaction.deletable_below)
    assert held["collectableAfterBatch"] == 14 and report["orphans"] == []
    code, text = seo("gc", "--dry-run", "--min-batches-to-retain", "3", str(root))
    assert "kept 14 replaced file(s) (7.0 KiB) for time travel: as_of 8 and earlier reads them\n" in text, text
    assert "\n  collectable after batch 14 (min_batches_to_retain 3), cleanup_delay and --older-than later" in text, text

    storage = open_storage(str(root))
    stream = make_committer(storage, compact_interval=5, min_batches_to_retain=3, cleanup_delay_ms=0)
    spark_batch = 7
    while ManifestLog(storage).latest_batch_id() < 13:
        commit_batch(stream, Q, spark_batch, list(range(spark_batch * 10, spark_batch * 10 + 10)))
        spark_batch += 1
    stream.close()
    report = _gc(root, "--older-than", "0s")  # after batch 13: still read by as_of 8
    assert report["orphans"] == [] and {f["uri"] for f in report["held"][0]["files"]} == replaced, report
    assert read_ids(root, as_of=8) == ids_upto(6)

    stream = make_committer(storage, compact_interval=5, min_batches_to_retain=3, cleanup_delay_ms=0)
    commit_batch(stream, Q, spark_batch, list(range(spark_batch * 10, spark_batch * 10 + 10)))  # batch 14
    stream.close()
    assert ManifestLog(storage).latest_batch_id() == 14
    report = _gc(root, "--older-than", "0s")
    assert {o["uri"] for o in report["orphans"]} == replaced and report["held"] == [], report


def test_on_a_delta_table_gc_says_when_only_the_delta_log_still_names_replaced_files(tmp_path):
    """Past the manifest's retention the Delta log still names the files (its versions before
    the OPTIMIZE read them): gc keeps them and says which log holds them."""
    from tests.delta.helpers import delta_committer

    root = tmp_path / "t"
    table_of(root, delta=True)
    code, out = seo("--json", "compact", *POLICY_ARGS, str(root))
    assert code == 0, out
    replaced = _listed(root, as_of=8) - _listed(root)
    storage = open_storage(str(root))
    stream = delta_committer(storage, compact_interval=5, min_batches_to_retain=3, cleanup_delay_ms=0)
    for spark_batch in range(7, 12):  # table batches 10-14
        commit_batch(stream, Q, spark_batch, list(range(spark_batch * 10, spark_batch * 10 + 10)))
    stream.close()
    report = _gc(root, "--older-than", "0s")
    assert report["orphans"] == [] and [h["reason"] for h in report["held"]] == ["delta"], report
    assert {f["uri"] for f in report["held"][0]["files"]} == replaced
    code, text = seo("gc", "--dry-run", str(root))
    assert "kept 14 replaced file(s)" in text and "that Delta versions still name:" in text, text
