"""Which extra provides what: the one declaration of the library's optional dependencies.

The core - the sink writing Parquet, JSON, CSV, text or ORC, dataset groups, the pyarrow and
pandas readers, and ``seo`` on such tables - needs ``pip install 'streaming-exactly-once[spark,arrow]'``
(the readers and ``seo`` need only ``[arrow]``). Every other feature is an extra, and its
package is imported only where the feature is used: the code that uses it calls ``require``
first, so a missing extra is a ``MissingDependencyError`` (a ``ConfigError``) that names the
``pip install`` line, raised when the sink is built or the table opened - before anything is
written - never a bare ``ModuleNotFoundError`` from deep inside.

``FEATURES`` is what the refusals, the tests that block each package, CI's install matrix and
the documentation's table of extras (``EXTRAS``) read; a new format or storage adds one entry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from .errors import MissingDependencyError


@dataclass(frozen=True)
class Feature:
    """A feature that needs an extra: ``modules`` must import, ``extra`` installs them, and a
    refusal calls it ``what``."""

    extra: str
    modules: tuple[str, ...]
    what: str


#: feature -> what it needs. A table format's key is its ``format=`` name, a storage's its
#: extra (``STORAGE`` maps URI schemes to it), a reader's its ``read.<name>``.
FEATURES: dict[str, Feature] = {
    "spark": Feature("spark", ("pyspark",), "the Spark sink (ExactlyOnceSink, DatasetSink)"),
    "arrow": Feature("arrow", ("pyarrow",), "reading with pyarrow"),
    "pandas": Feature("arrow", ("pandas", "pyarrow"), "read.pandas"),
    "polars": Feature("polars", ("polars", "pyarrow"), "read.polars"),
    "duckdb": Feature("duckdb", ("duckdb", "pyarrow"), "read.duckdb"),
    "delta": Feature("delta", ("deltalake", "pyarrow"), "format='delta' (a Delta Lake table)"),
    "iceberg": Feature("iceberg", ("pyiceberg", "pyarrow"), "format='iceberg' (an Apache Iceberg table)"),
    "s3": Feature("s3", ("s3fs",), "s3:// storage"),
    "azure": Feature("azure", ("adlfs", "azure.storage.blob"), "az://, abfs:// and abfss:// storage"),
    "gcs": Feature("gcs", ("gcsfs",), "gs:// storage"),
    "metrics": Feature("metrics", ("prometheus_client", "opentelemetry.sdk"), "metrics= (Prometheus and OpenTelemetry metrics)"),
    "lineage": Feature("lineage", ("openlineage.client",), "lineage= (OpenLineage events)"),
}

#: URI scheme -> the storage feature it needs (schemes not here need no extra).
STORAGE = {"s3": "s3", "s3a": "s3", "s3n": "s3", "az": "azure", "abfs": "azure", "abfss": "azure", "gs": "gcs", "gcs": "gcs"}

#: The extras of setup.cfg and what each one enables, in the order the docs list them (the
#: docs' table of extras; a test checks it against setup.cfg and ``FEATURES``).
EXTRAS: dict[str, str] = {
    "spark": "the sink (`ExactlyOnceSink`, `DatasetSink`), `read.spark` and `seo run`; leave it out on a cluster that brings its own pyspark",
    "arrow": "the pyarrow and pandas readers (`read.arrow`, `read.pandas`, `read.dataset`), `seo read`, and the sink's `direct` staging",
    "polars": "`read.polars`",
    "duckdb": "`read.duckdb`",
    "delta": "`format='delta'`: each batch is also a Delta Lake commit (delta-rs, no JVM); `read.delta_version`",
    "iceberg": "`format='iceberg'`: each batch is also an Iceberg snapshot (pyiceberg, no JVM), with SQLite and PostgreSQL SQL catalogs",
    "s3": "`s3://`, `s3a://` and `s3n://` tables",
    "azure": "`az://`, `abfs://` and `abfss://` tables (Azure Blob Storage, ADLS Gen2)",
    "gcs": "`gs://` and `gcs://` tables (Google Cloud Storage)",
    "metrics": "`metrics=`: Prometheus' HTTP endpoint, the OpenTelemetry SDK and its OTLP/HTTP exporter (see Observability)",
    "lineage": "`lineage=`: OpenLineage events of every query and batch (openlineage-python)",
    "delta-spark": "Delta's JVM side for Spark 4.0-4.2 clusters (not in `all`)",
    "all": "every extra above but `delta-spark`",
}


def install_line(extra: str) -> str:
    """What a user types to get ``extra``."""
    return f"pip install 'streaming-exactly-once[{extra}]'"


def missing(feature: str) -> str | None:
    """The first module ``feature`` needs that does not import, or None when it is installed."""
    for module in FEATURES[feature].modules:
        try:
            importlib.import_module(module)
        except ImportError:
            return module
    return None


def require(feature: str, *, what: str | None = None) -> None:
    """Raise ``MissingDependencyError`` naming the extra unless ``feature``'s packages import.
    ``what``: how the refusal names the feature, where the caller knows it better (a URI's scheme)."""
    package = missing(feature)
    if package is not None:
        spec = FEATURES[feature]
        raise MissingDependencyError(package=package, extra=spec.extra, feature=what or spec.what)


def missing_extra(exc: ModuleNotFoundError) -> MissingDependencyError | None:
    """The refusal an optional package's ``ModuleNotFoundError`` stands for (None: not one of them):
    the last line of defence where an import escaped its feature's ``require``."""
    top = (exc.name or "").split(".")[0]
    for feature in FEATURES.values():
        if any(module.split(".")[0] == top for module in feature.modules):
            return MissingDependencyError(package=exc.name or top, extra=feature.extra, feature=feature.what)
    return None


def require_storage(uri: str) -> None:
    """``require`` the storage extra that ``uri``'s scheme needs, if any."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else "file"
    feature = STORAGE.get(scheme)
    if feature is not None:
        require(feature, what=f"{scheme}:// storage ({uri})")
