"""The sinks' keyword-only options: names and defaults IDEs and mypy see, TypeError for a misspelt
option, ConfigError for a bad value, one name per setting from the sink to the committer."""

from __future__ import annotations

import dataclasses
import inspect
import warnings

import pytest

from streaming_exactly_once import DatasetSink, ExactlyOnceSink, Output, read
from streaming_exactly_once.errors import ConfigError
from streaming_exactly_once.sink.keywords import GroupKeywords, SinkKeywords, conf_keys, declared
from streaming_exactly_once.sink.options import GroupOptions, SinkOptions, default_staging_mode
from streaming_exactly_once.storage import open_storage


def _params(fn, skip=("self", "cls", "table", "root")):
    return {n: p.default for n, p in inspect.signature(fn).parameters.items() if n not in skip}


def test_every_option_is_declared_once_and_everything_else_comes_from_it():
    """``sink.keywords`` declares each option; the signatures help() and inspect show, the
    parsed options, the job config's [sink] keys and the docs' table are derived from it."""
    table = {d.name: d.option.default for d in declared(SinkKeywords)}
    group = {d.name: d.option.default for d in declared(GroupKeywords)}
    assert _params(ExactlyOnceSink.__init__) == table
    assert _params(DatasetSink.__init__) == group and set(table) < set(group)
    for fn in (ExactlyOnceSink.__init__, DatasetSink.__init__):
        kinds = {p.kind for n, p in inspect.signature(fn).parameters.items() if n not in ("self", "table", "root")}
        assert kinds == {inspect.Parameter.KEYWORD_ONLY}
    stored = {f.name for f in dataclasses.fields(SinkOptions)}
    expected = {d.name + ("_ms" if d.option.duration else "") for d in declared(SinkKeywords)} - {"options"}
    assert stored == expected  # "options" is the deprecated name of writer_options
    assert {k for k in conf_keys() if k not in ("table", "checkpoint", "metrics_path")} <= set(table)
    for d in declared(GroupKeywords):
        assert d.name in (ExactlyOnceSink.__doc__ or "") + (DatasetSink.__doc__ or "") and d.option.doc


def test_defaults_parse_to_the_dataclass_defaults():
    assert SinkOptions.build({}) == SinkOptions()
    assert GroupOptions.build({}) == GroupOptions()


def test_misspelt_option_is_a_type_error_and_bad_value_a_config_error(tmp_path):
    with pytest.raises(TypeError, match="partiton_by"):
        ExactlyOnceSink(str(tmp_path / "t"), partiton_by=["p"])  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="policy"):
        ExactlyOnceSink(str(tmp_path / "t"), policy="partial")  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="lease_timeout"):
        ExactlyOnceSink(str(tmp_path / "t"), lease_timeout="ten minutes")
    with pytest.raises(ConfigError, match="staging_mode"):
        ExactlyOnceSink(str(tmp_path / "t"), staging_mode="copy")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="applies to format='delta' tables only"):
        ExactlyOnceSink(str(tmp_path / "t"), delta_log_retention="1d")
    with pytest.raises(ConfigError, match="checks takes Check objects"):
        DatasetSink(str(tmp_path / "g"), dataset_column="p", checks=["amount > 0"])  # type: ignore[list-item]


def test_one_name_per_setting_from_the_sink_to_the_committer(tmp_path):
    sink = ExactlyOnceSink(
        str(tmp_path / "t"),
        retention="7d",
        source_retention="1h",
        cleanup_delay=30,
        lease_timeout="5s",
        writer_options={"compression": "zstd"},
        partition_by="p",
        watermark_columns=("ts",),
    )
    opts = sink.options
    assert (opts.retention_ms, opts.source_retention_ms, opts.cleanup_delay_ms, opts.lease_timeout_ms) == (
        7 * 86_400_000,
        3_600_000,
        30_000,
        5_000,
    )
    assert opts.partition_by == ("p",) and opts.watermark_columns == ("ts",)
    committer = opts.committer_options()
    assert (committer.retention_ms, committer.source_retention_ms, committer.cleanup_delay_ms, committer.lease_timeout_ms) == (
        opts.retention_ms,
        opts.source_retention_ms,
        opts.cleanup_delay_ms,
        opts.lease_timeout_ms,
    )
    assert committer.writer_options == (("compression", "zstd"),)


def test_options_is_a_deprecated_name_of_writer_options(tmp_path):
    with pytest.warns(DeprecationWarning, match="writer_options"):
        sink = ExactlyOnceSink(str(tmp_path / "t"), options={"header": "true"})
    assert dict(sink.options.writer_options) == {"header": "true"}
    with pytest.raises(ConfigError, match="not both"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ExactlyOnceSink(str(tmp_path / "t"), options={"a": "1"}, writer_options={"a": "2"})


def test_group_options_belong_to_dataset_sink(tmp_path):
    sink = DatasetSink(str(tmp_path / "g"), outputs=[Output("raw")], policy="partial", partition_by=["p"])
    assert sink.group.policy == "partial" and [o.name for o in sink.outputs] == ["raw"]
    assert not hasattr(sink.options, "policy")
    with pytest.raises(ConfigError, match="policy"):
        DatasetSink(str(tmp_path / "g"), dataset_column="p", policy="some")  # type: ignore[arg-type]


def test_from_config_refuses_unknown_keys_with_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError, match="Valid keys: .*writer_options"):
        ExactlyOnceSink.from_config({"table": str(tmp_path / "t"), "retension": "1d"})
    with pytest.raises(ConfigError, match="policy"):
        ExactlyOnceSink.from_config({"table": str(tmp_path / "t"), "policy": "full"})
    sink = ExactlyOnceSink.from_config({"table": str(tmp_path / "t"), "checkpoint": str(tmp_path / "c"), "retention": "1d"})
    assert sink.options.retention_ms == 86_400_000 and sink.checkpoint_location == str(tmp_path / "c")


def test_staging_mode_default_is_the_sinks_decision(tmp_path):
    assert default_staging_mode(open_storage(str(tmp_path / "t"))) == "rename"
    assert default_staging_mode(open_storage("memory://t")) == "rename"
    assert ExactlyOnceSink(str(tmp_path / "t")).staging_mode == "rename"


def test_readers_take_explicit_keywords():
    for fn in (read.spark, read.dataset, read.arrow, read.pandas, read.polars, read.duckdb):
        params = inspect.signature(fn).parameters
        assert "kwargs" not in params and {"as_of", "storage_options", "format", "options"} <= set(params)


def test_compaction_takes_true_a_mapping_or_a_job_configs_text_and_refuses_what_it_cannot_compact(tmp_path):
    from streaming_exactly_once.commit.rewrites.data_compaction import CompactionPolicy

    assert SinkOptions.build({}).compaction is None
    assert SinkOptions.build({"compaction": True}).compaction == CompactionPolicy()
    policy = SinkOptions.build({"compaction": {"target_size": "64MB", "min_files": 4, "min_age": "9 days"}}).compaction
    assert policy == CompactionPolicy(target_size=64 << 20, min_files=4, min_age_ms=9 * 86_400_000, max_bytes=64 << 20)
    assert SinkOptions.build({"compaction": "min_files=3,max_bytes=1GB"}).compaction == CompactionPolicy(min_files=3, max_bytes=1 << 30)
    assert SinkOptions.build({"compaction": "false"}).compaction is None
    from streaming_exactly_once.commit.rewrites.compaction_consumers import Consumer

    assert SinkOptions.build({"compaction": {"consumers": ["/ck/a"]}}).compaction.consumers == (Consumer("/ck/a"),)
    assert SinkOptions.build({"compaction": {"consumers": {"/ck/a": "1 day"}}}).compaction.consumers == (Consumer("/ck/a", 86_400_000),)
    assert SinkOptions.build({"compaction": True}).committer_options().compaction == CompactionPolicy()
    assert SinkOptions.build({"compaction": True, "format": ["delta", "iceberg"]}).compaction == CompactionPolicy()
    for bad, words in (
        ({"compaction": {"target": "1MB"}}, "Unknown key(s) 'target'"),
        ({"compaction": {"min_files": 1}}, "min_files must be >= 2"),
        ({"compaction": {"target_size": "12 parsecs"}}, "must be a size"),
        ({"compaction": True, "format": "json"}, "rewrites Parquet files"),
        ({"compaction": {"consumers": 3}}, "compaction.consumers takes checkpoint locations"),
        ({"compaction": {"consumers": ["/ck"]}, "format": "delta", "spark_manifest": False}, "read a table through its _spark_metadata"),
        ({"compaction": {"consumers": {"/ck": "soon"}}}, "compaction.consumers"),
    ):
        with pytest.raises(ConfigError) as err:
            SinkOptions.build(bad)
        assert words in str(err.value), str(err.value)
    assert DatasetSink(str(tmp_path / "g"), dataset_column="d", compaction=True).options.compaction == CompactionPolicy()
    with pytest.raises(ConfigError) as err:
        DatasetSink(str(tmp_path / "g"), outputs=[Output("a", format="iceberg"), Output("b", format="json")], compaction=True)
    assert "output 'b' writes another format" in str(err.value)
