"""Recovery never deletes a file a published manifest entry names, whatever an intent says.

The trigger: a power cut on a filesystem that reorders unlinks persists the WAL claim's delete
but not the deletes of a direct-mode commit's intents. The next recovery finds a staging
directory with no claim - an attempt that "never claimed" - whose intents name data files of a
batch that is published. The manifest spells those files differently from the intents (URI
escapes, a table moved to a new root), which the guard must see through.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

import pytest

from streaming_exactly_once import read
from streaming_exactly_once.storage import open_storage
from tests.commit.helpers import make_committer, stage_and_commit

Q = "11111111-1111-1111-1111-111111111111"


def _commit_two_batches_keeping_the_intents(root, partition):
    storage = open_storage(str(root))
    committer = make_committer(storage)
    stage_and_commit(committer, Q, 0, list(range(10)), mode="direct", partition=partition)
    kept: dict[str, bytes] = {}
    delete_tree = storage.delete_tree

    def keep_intents(path):
        if path.endswith("/intents"):
            for name in os.listdir(root / path):
                kept[f"{path}/{name}"] = (root / path / name).read_bytes()
        return delete_tree(path)

    storage.delete_tree = keep_intents
    stage_and_commit(committer, Q, 1, list(range(10, 20)), mode="direct", partition=partition)
    committer.close()
    assert kept, "the commit removed no intents"
    return kept


@pytest.mark.parametrize("case", ["plain", "space-in-root", "space-in-partition", "moved"])
def test_intents_that_outlive_their_claim_never_delete_published_files(tmp_path, case):
    root = tmp_path / ("my table" if case == "space-in-root" else "t")
    root.mkdir()
    kept = _commit_two_batches_keeping_the_intents(root, "p=a b" if case == "space-in-partition" else "p=a")
    if case == "moved":
        moved = tmp_path / "t2"
        os.rename(root, moved)
        root = moved
        reopened = make_committer(open_storage(str(root)))
        reopened.open()  # records the new root beside the old one
        reopened.close()
    for path, data in kept.items():  # the power cut lost the intents' unlinks
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    committer = make_committer(open_storage(str(root)))
    report = committer.open()
    committer.close()
    assert report.aborted_attempts, "the resurrected staging directory was not found"
    assert report.deleted_data_files == 0
    files = read.files(str(root))
    assert len(files) == 4 and all(os.path.exists(urlparse(uri).path) for uri in files), files
