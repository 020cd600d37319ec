"""r13b: input file names with glob characters make Spark's file source read rows twice.

Not the sink's bug (plain ``foreachBatch`` shows it, see the README's "Limits"), but a sink that
promises exactly once must say so when it happens: the batch's input files come from the
checkpoint, and ``reread_inputs`` names the ones that trigger it.
"""

from __future__ import annotations

import logging
import os
from collections import Counter

import pytest

from streaming_exactly_once import ExactlyOnceSink, read
from streaming_exactly_once.checkpoint.reader import InputFile
from streaming_exactly_once.sink.input_filter import reread_inputs


def inputs(*paths: str, source: int = 0) -> list[InputFile]:
    return [InputFile(source=source, path=p, timestamp=0) for p in paths]


def test_which_batches_are_read_twice():
    d = "file:///in/"
    # paths as Spark's source log writes them: URI-encoded, '*' and ',' left as they are
    assert reread_inputs(inputs(d + "a.csv", d + "b.csv")) == []
    assert reread_inputs(inputs(d + "q%3Fx.csv")) == []  # alone in its batch: read once
    assert reread_inputs(inputs(d + "q%3Fx.csv", d + "a.csv")) == ["file:///in/q?x.csv"]
    assert reread_inputs(inputs(d + "st*r.csv", d + "br%5B1%5D.csv")) == ["file:///in/st*r.csv", "file:///in/br[1].csv"]
    for name in ("c%7Ba,b%7D.csv", "b%5Cs.csv", "br%5D1.csv"):
        assert reread_inputs(inputs(d + name, d + "a.csv")), name
    # '%', '#', '^', '!', spaces and non-ASCII letters are no glob characters
    assert reread_inputs(inputs(d + "x%5Ey!z%23w%2525v.csv", d + "%C3%A9%20%C3%BC.csv", d + "a.csv")) == []
    # a glob character in a directory counts (an escaped input directory: every file is read again)
    assert len(reread_inputs(inputs("file:///in%5B1%5D/a.csv", "file:///in%5B1%5D/b.csv"))) == 2
    # per source: one such file alone among its own source's files is read once
    assert reread_inputs(inputs(d + "q%3Fx.csv", source=0) + inputs("file:///other/a.csv", source=1)) == []


@pytest.mark.spark
def test_the_sink_warns_and_names_the_files(spark, tmp_path, caplog):
    inp = tmp_path / "in"
    inp.mkdir()
    names = ["p1.csv", "q?x.csv", "p2.csv"]
    for i, name in enumerate(names):
        path = inp / name
        path.write_text("".join(f"{i * 10 + r},p,1.0\n" for r in range(3)))
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    table = tmp_path / "table"
    caplog.set_level(logging.WARNING, logger="streaming_exactly_once.sink")
    sink = ExactlyOnceSink(str(table))
    stream_df = spark.readStream.schema("id LONG, p STRING, v DOUBLE").option("maxFilesPerTrigger", 3).csv(str(inp))
    sink.start(stream_df, checkpoint_location=str(tmp_path / "ckpt"), trigger={"availableNow": True}).awaitTermination()
    sink.close()
    warnings = [r.getMessage() for r in caplog.records if "glob characters" in r.getMessage()]
    assert len(warnings) == 1 and f"{inp}/q?x.csv" in warnings[0] and "maxFilesPerTrigger=1" in warnings[0]
    # what Spark 4.3 does (measured; if this changes, update README "Limits" and reread_inputs)
    counts = Counter(read.pandas(str(table))["id"].tolist())
    assert {i: counts[i] for i in (0, 10, 20)} == {0: 2, 10: 1, 20: 2}, "Spark's re-reading of glob-named batches changed"
