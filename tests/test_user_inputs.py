"""What new users naturally type is accepted: Spark's interval words, compound durations,
``timedelta``, and delta-rs style storage keys (or an error naming the key)."""

from __future__ import annotations

import datetime as dt
import warnings

import pytest

from streaming_exactly_once import ExactlyOnceSink
from streaming_exactly_once.config import parse_duration_ms
from streaming_exactly_once.errors import ConfigError
from streaming_exactly_once.storage.option_keys import translate_storage_options


@pytest.mark.parametrize(
    ("given", "ms"),
    [
        ("10 seconds", 10_000),
        ("5 minutes", 300_000),
        ("7 days", 604_800_000),
        ("1 hour 30 minutes", 5_400_000),
        ("1h30m", 5_400_000),
        ("interval 2 seconds", 2_000),
        ("1 minute", 60_000),
        ("500 milliseconds", 500),
        ("500ms", 500),
        ("30s", 30_000),
        ("10m", 600_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("1.5h", 5_400_000),
        (45, 45_000),
        (0.5, 500),
        (dt.timedelta(minutes=5), 300_000),
    ],
)
def test_durations_as_users_write_them(given, ms):
    assert parse_duration_ms(given, key="retention") == ms


@pytest.mark.parametrize("given", ["ten minutes", "10 parsecs", "5 5", "", "10s 5", True, None, [1]])
def test_what_is_not_a_duration_names_the_key_and_the_spellings(given):
    with pytest.raises(ConfigError, match=r"retention must be a duration like .*'10 seconds'.*timedelta"):
        parse_duration_ms(given, key="retention")


@pytest.mark.parametrize("given", ["-1d", -5, dt.timedelta(seconds=-1)])
def test_negative_durations_say_negative(given):
    with pytest.raises(ConfigError, match="must not be negative"):
        parse_duration_ms(given, key="retention")


def test_sink_options_take_spark_intervals_and_timedelta(tmp_path):
    sink = ExactlyOnceSink(str(tmp_path / "t"), lease_timeout="5 minutes", cleanup_delay=dt.timedelta(seconds=10), retention="7 days")
    assert (sink.options.lease_timeout_ms, sink.options.cleanup_delay_ms, sink.options.retention_ms) == (300_000, 10_000, 604_800_000)


def test_stop_takes_a_duration_and_timeout_s_is_deprecated(tmp_path):
    sink = ExactlyOnceSink(str(tmp_path / "t"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sink.stop(timeout="2m")
        sink.stop("30 seconds")
        sink.stop(dt.timedelta(seconds=1))
    with pytest.warns(DeprecationWarning, match=r"stop\(timeout=\.\.\.\)"):
        sink.stop(timeout_s=5.0)
    with pytest.raises(ConfigError, match="timeout must be a duration"):
        sink.stop(timeout="soon")


def test_delta_rs_s3_keys_are_translated():
    given = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ACCESS_KEY_ID": "k",
        "aws_secret_access_key": "s",
        "AWS_REGION": "eu-west-1",
        "AWS_ALLOW_HTTP": "true",
        "conditional_put": "etag",
    }
    assert translate_storage_options("s3", given) == {
        "endpoint_url": "http://127.0.0.1:9000",
        "key": "k",
        "secret": "s",
        "client_kwargs": {"region_name": "eu-west-1"},
    }
    ours = {"endpoint_url": "http://x", "key": "k", "secret": "s", "seo_server_side_copy": True}
    assert translate_storage_options("s3", ours) == ours


def test_delta_rs_azure_and_gcs_keys_are_translated():
    assert translate_storage_options("abfss", {"AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": "k"}) == {
        "account_name": "acct",
        "account_key": "k",
    }
    assert translate_storage_options("gs", {"GOOGLE_SERVICE_ACCOUNT": "/keys/sa.json"}) == {"token": "/keys/sa.json"}
    assert translate_storage_options("gs", {"google_service_account_key": '{"type": "service_account"}'}) == {"token": {"type": "service_account"}}


def test_an_untranslatable_key_is_a_config_error_naming_it_and_the_spelling():
    with pytest.raises(ConfigError, match=r"'AWS_S3_EXPRESS'.*endpoint_url, key, secret") as info:
        translate_storage_options("s3", {"AWS_S3_EXPRESS": "true"})
    assert info.value.key == "AWS_S3_EXPRESS"


@pytest.mark.s3
def test_readers_take_delta_rs_keys_on_s3_instead_of_a_type_error(s3_bucket, moto_endpoint):
    """Before, ``AWS_ENDPOINT_URL`` reached aiobotocore: ``TypeError: AioSession.__init__() got an
    unexpected keyword argument``. Now the table is written and read with the delta-rs keys."""
    pytest.importorskip("pyarrow")
    from streaming_exactly_once import read
    from tests.readers.tables import write_table

    keys = {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
    ids = write_table(f"s3://{s3_bucket}/events", storage_options=keys)
    assert sorted(read.pandas(f"s3://{s3_bucket}/events", storage_options=keys)["id"]) == ids


def test_a_misspelt_set_key_names_the_closest_one(capsys, tmp_path):
    """``seo run --set sink.lease_timout=5s``: the unknown key, then "did you mean", then the list."""
    from tests.cli.test_cli import seo

    code, _, err = seo(capsys, "run", "landing_to_parquet", "--set", "sink.lease_timout=5s", "--set", "sink.table=" + str(tmp_path / "t"))
    assert code == 1 and "Unknown key(s) 'lease_timout' in" in err and "Did you mean 'lease_timeout'?" in err, err
    assert err.index("Did you mean") < err.index("Valid keys")


@pytest.mark.parametrize(
    ("given", "canonical"),
    [("Delta", "delta"), ("PARQUET", "parquet"), (["Delta", "ICEBERG"], "delta+iceberg"), ("Delta+Iceberg", "delta+iceberg")],
)
def test_the_sink_takes_a_format_in_any_case_as_sparks_format_does(tmp_path, given, canonical):
    assert ExactlyOnceSink(str(tmp_path / "t"), format=given).options.format == canonical


def test_a_readers_misspelt_format_lists_the_choices_before_reading(tmp_path):
    from streaming_exactly_once import read

    choices = r"format 'parqet' is not one the readers read: the choices are parquet, orc, csv, json\. Did you mean 'parquet'\?"
    with pytest.raises(ConfigError, match=choices):
        read.pandas(str(tmp_path / "no-table-here"), format="parqet")  # refused before the path is looked at
    with pytest.raises(ConfigError, match="the choices are parquet, orc, csv, json"):
        read.arrow(str(tmp_path / "no-table-here"), format="xml")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"processingTime": "10s"}, {"processingTime": "10000 milliseconds"}),
        ({"processingTime": "10 seconds"}, {"processingTime": "10000 milliseconds"}),
        ("10s", {"processingTime": "10000 milliseconds"}),
        (dt.timedelta(minutes=1), {"processingTime": "60000 milliseconds"}),
        ({"continuous": "1s"}, {"continuous": "1000 milliseconds"}),
        ({"availableNow": True}, {"availableNow": True}),
        (None, {}),
    ],
)
def test_a_trigger_interval_takes_every_duration_spelling(given, expected):
    from streaming_exactly_once.config import spark_trigger

    assert spark_trigger(given) == expected


def test_a_trigger_interval_that_is_no_duration_names_the_trigger():
    from streaming_exactly_once.config import spark_trigger

    with pytest.raises(ConfigError, match=r"trigger processingTime must be a duration like"):
        spark_trigger({"processingTime": "ten seconds"})


@pytest.mark.spark
@pytest.mark.parametrize("trigger", [{"processingTime": "1s"}, "1s"])
def test_sink_start_runs_a_query_with_a_short_form_trigger(spark, tmp_path, trigger):
    """Spark's own parser refused ``"10s"`` (``INVALID_INTERVAL_FORMAT``); the sink hands it over in Spark's spelling."""
    from streaming_exactly_once import read

    landing = tmp_path / "in"
    landing.mkdir()
    (landing / "a.csv").write_text("1\n2\n")
    stream = spark.readStream.schema("id LONG").csv(str(landing))
    sink = ExactlyOnceSink(str(tmp_path / "t"))
    query = sink.start(stream, checkpoint_location=str(tmp_path / "ckpt"), trigger=trigger)
    try:
        query.processAllAvailable()
        assert query.isActive and query.lastProgress is not None
    finally:
        sink.stop()
    assert sorted(read.pandas(str(tmp_path / "t"))["id"]) == [1, 2]


def test_starting_offsets_lets_the_table_go_again(tmp_path):
    """A sink built only to ask where the table's offsets end must not keep its writer lease:
    the real query's writer would wait ``lease_timeout`` for it."""
    from streaming_exactly_once.storage import open_storage
    from tests.commit.helpers import make_committer, stage_and_commit

    table = str(tmp_path / "t")
    first = make_committer(open_storage(table))
    stage_and_commit(first, "q" * 36, 0, [1])
    first.close()
    probe = ExactlyOnceSink(table, lease_timeout="10m")
    assert probe.starting_offsets() is None  # no partitioned source recorded
    writer = make_committer(open_storage(table))
    writer.open()  # at once: no ConcurrentWriterError from the probe's lease
    writer.close()
    holder = ExactlyOnceSink(table, lease_timeout="10m")
    holder.open()
    assert holder.starting_offsets() is None and holder.committer.lease.holds()  # a holder keeps what it held
    holder.close()
