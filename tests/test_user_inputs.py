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
