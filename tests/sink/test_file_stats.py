"""Per-file statistics merge the same way in a writer task and on the driver."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from streaming_exactly_once.sink.file_stats import FileStats

FAILED = "_failed"


def chunk(ids, days, failed):
    return pa.table({"id": pa.array(ids, pa.int64()), "day": pa.array(days, pa.date32()), FAILED: pa.array(failed, pa.string())})


def counted(*chunks) -> FileStats:
    stats = FileStats()
    for c in chunks:
        stats.add_rows(c, ("day", "id"), failed_checks_column=FAILED, check_separator="; ")
    return stats


def test_chunks_files_and_the_driver_count_alike():
    d1, d2, d3 = dt.date(2024, 5, 1), dt.date(2024, 5, 2), dt.date(2024, 5, 3)
    a = chunk([3, None], [d2, None], ["", "amount >= 0"])
    b = chunk([1, 7], [d3, d1], ["amount >= 0; id not null", ""])
    whole = counted(pa.concat_tables([a, b]))
    by_chunks = counted(a, b)
    assert by_chunks == whole
    assert whole.rows == 4 and whole.nulls == {"id": 1, "day": 1, FAILED: 0}
    assert whole.marks == {"day": [d1, d3], "id": [1, 7]}
    assert (whole.failed["amount >= 0"], whole.failed["id not null"]) == (2, 1)
    # the driver adds up the files' messages: the same totals as one file of all the rows
    driver = FileStats()
    for stats in (counted(a), counted(b)):
        driver.merge(FileStats.from_json(stats.to_json(), rows=stats.rows))
    assert driver == FileStats.from_json(whole.to_json(), rows=whole.rows)
    assert driver.watermarks() == {"day": {"min": "2024-05-01", "max": "2024-05-03"}, "id": {"min": 1, "max": 7}}


def test_a_column_of_nulls_has_no_watermark():
    stats = counted(chunk([None], [None], [""]))
    assert stats.marks == {} and stats.nulls["day"] == 1
