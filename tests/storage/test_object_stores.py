"""Azure (Azurite) and GCS (fake-gcs-server) beyond the shared contract: the exclusive-create
probe, the exact requests that carry the precondition, and one clear error for a rejected
credential or a missing container/bucket. A proxy (``tests/emulators/proxy.py``) in front of
the real emulator drops a precondition or refuses a token where a test needs that."""

from __future__ import annotations

import datetime as dt
import re
import threading

import pytest

from streaming_exactly_once.errors import ExactlyOnceError, StorageAccessError, UnsupportedStorageError
from streaming_exactly_once.storage import open_storage
from tests.emulators.proxy import HttpProxy
from tests.emulators.servers import AZURITE_ACCOUNT, AZURITE_KEY

PROBE_DIR = "_seo/probe"


def _winners(storage, path: str, n: int = 16) -> int:
    wins, barrier = [], threading.Barrier(n)

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            storage.put_if_absent(path, b"%d" % i)
            wins.append(i)
        except FileExistsError:
            pass

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(wins)


# -- Azure ------------------------------------------------------------------------------------


def _sas_options(endpoint: str) -> dict:
    """A connection string with an account SAS: requests are not header-signed, so a proxy may
    drop a header without breaking authentication."""
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    sas = generate_account_sas(
        AZURITE_ACCOUNT,
        AZURITE_KEY,
        resource_types=ResourceTypes(service=True, container=True, object=True),
        permission=AccountSasPermissions(read=True, write=True, delete=True, list=True, add=True, create=True),
        expiry=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1),
    )
    return {"connection_string": f"BlobEndpoint={endpoint}/{AZURITE_ACCOUNT};SharedAccessSignature={sas}"}


def _drop_header(name: str):
    return lambda method, path, headers: (path, {k: v for k, v in headers.items() if k.lower() != name})


@pytest.mark.azure
class TestAzure:
    def test_create_is_one_put_with_if_none_match(self, azurite, azure_container):
        with HttpProxy(azurite.url) as proxy:
            storage = open_storage(f"az://{azure_container}/t", _sas_options(proxy.url))
            storage.put_if_absent("a", b"x" * 1000)
            puts = [(p, h) for m, p, h in proxy.seen if m == "PUT"]
            assert len(puts) == 1 and puts[0][1].get("If-None-Match") == "*"
            assert f"/{azure_container}/t/a" in puts[0][0]

    def test_an_endpoint_ignoring_if_none_match_is_refused(self, azurite, azure_container):
        with HttpProxy(azurite.url, rewrite=_drop_header("if-none-match")) as proxy:
            storage = open_storage(f"abfs://{azure_container}/t", _sas_options(proxy.url))
            assert _winners(storage, "race") > 1, "without the header every create wins"
            with pytest.raises(UnsupportedStorageError) as caught:
                storage.check_exclusive_create(PROBE_DIR)
            assert proxy.url in str(caught.value) and azure_container in str(caught.value)
            assert storage.list_dir(PROBE_DIR) == []
        honest = open_storage(f"abfs://{azure_container}/t", _sas_options(azurite.url))
        honest.check_exclusive_create(PROBE_DIR)  # the same container on the real endpoint is fine
        assert honest.list_dir(PROBE_DIR) == []

    def test_rename_is_a_conditional_server_side_copy(self, azure_storage):
        azure_storage.put_if_absent("big", b"z" * 3_000_000)
        azure_storage.put_if_absent("taken", b"t")
        with pytest.raises(FileExistsError):
            azure_storage.rename("big", "taken")
        assert azure_storage.read_bytes("taken") == b"t" and azure_storage.exists("big")
        azure_storage.rename("big", "moved/big")
        assert azure_storage.info("moved/big").size == 3_000_000 and not azure_storage.exists("big")

    def test_hadoop_spelling_with_account_host(self, azure_container, azure_options):
        storage = open_storage(f"abfss://{azure_container}@{AZURITE_ACCOUNT}.dfs.core.windows.net/t", azure_options)
        storage.put_if_absent("f", b"1")
        assert storage.uri("f") == f"abfss://{azure_container}@{AZURITE_ACCOUNT}.dfs.core.windows.net/t/f"
        assert open_storage(f"az://{azure_container}/t", azure_options).read_bytes("f") == b"1"

    def test_wrong_key_is_one_error_naming_the_uri(self, azurite, azure_container):
        wrong = azurite.extra["connection_string"].replace(AZURITE_KEY, "A" * 86 + "==")
        storage = open_storage(f"az://{azure_container}/t", {"connection_string": wrong})
        for op in (lambda: storage.read_bytes("x"), lambda: storage.list_dir("d"), lambda: storage.put_if_absent("x", b"1")):
            with pytest.raises(StorageAccessError) as caught:
                op()
            err = caught.value
            assert isinstance(err, ExactlyOnceError) and err.reason == "credentials"
            assert f"az://{azure_container}/t/" in str(err) and "credentials" in str(err)

    def test_missing_container_is_one_error_naming_the_uri(self, azure_options):
        storage = open_storage("az://no-such-container/t", azure_options)
        for op in (
            lambda: storage.read_bytes("x"),
            lambda: storage.list_dir(""),
            lambda: storage.exists("x"),
            lambda: storage.put_if_absent("x", b"1"),
        ):
            with pytest.raises(StorageAccessError) as caught:
                op()
            assert caught.value.reason == "container"
            assert "az://no-such-container/t" in str(caught.value) and "'no-such-container' does not exist" in str(caught.value)

    def test_a_missing_blob_in_an_existing_container_stays_file_not_found(self, azure_storage):
        with pytest.raises(FileNotFoundError):
            azure_storage.read_bytes("nope")
        assert azure_storage.list_dir("nope") == []


# -- GCS --------------------------------------------------------------------------------------


def _drop_generation_match(method, path, headers):
    return re.sub(r"([?&])ifGenerationMatch=0(&?)", lambda m: m.group(1) if m.group(2) else "", path), headers


@pytest.mark.gcs
class TestGcs:
    @pytest.mark.parametrize("size", [1000, 60 * 2**20])
    def test_create_is_one_multipart_upload_with_if_generation_match(self, fake_gcs, gcs_bucket, gcs_options, size):
        """Also above gcsfs's 50 MiB chunk size, where it would switch to a resumable upload whose
        precondition fake-gcs-server ignores."""
        with HttpProxy(fake_gcs.url) as proxy:
            storage = open_storage(f"gs://{gcs_bucket}/t", {**gcs_options, "endpoint_url": proxy.url})
            storage.put_if_absent("a", b"x" * size)
            with pytest.raises(FileExistsError):
                storage.put_if_absent("a", b"y")
            uploads = [p for m, p, _ in proxy.seen if m == "POST" and "/upload/" in p]
            assert len(uploads) == 2
            assert all("uploadType=multipart" in p and "ifGenerationMatch=0" in p for p in uploads)
        assert storage.info("a").size == size

    def test_an_endpoint_ignoring_if_generation_match_is_refused(self, fake_gcs, gcs_bucket, gcs_options):
        with HttpProxy(fake_gcs.url, rewrite=_drop_generation_match) as proxy:
            storage = open_storage(f"gs://{gcs_bucket}/t", {**gcs_options, "endpoint_url": proxy.url})
            assert _winners(storage, "race") > 1, "without the precondition every create wins"
            with pytest.raises(UnsupportedStorageError) as caught:
                storage.check_exclusive_create(PROBE_DIR)
            assert proxy.url in str(caught.value) and gcs_bucket in str(caught.value)
            assert storage.list_dir(PROBE_DIR) == []
        open_storage(f"gs://{gcs_bucket}/t", gcs_options).check_exclusive_create(PROBE_DIR)

    def test_refused_token_is_one_error_naming_the_uri(self, fake_gcs, gcs_bucket, gcs_options):
        """GCS answers 403 to a token without access; the proxy plays that part for one token."""
        from google.oauth2.credentials import Credentials

        body = b'{"error":{"code":403,"message":"caller does not have storage.objects access"}}'

        def refuse(method, path, headers):
            auth = {k.lower(): v for k, v in headers.items()}.get("authorization")
            return (403, body) if auth == "Bearer wrong" else None

        with HttpProxy(fake_gcs.url, answer=refuse) as proxy:
            options = {**gcs_options, "endpoint_url": proxy.url, "token": Credentials("wrong")}
            storage = open_storage(f"gs://{gcs_bucket}/t", options)
            for op in (lambda: storage.read_bytes("x"), lambda: storage.list_dir("d"), lambda: storage.put_if_absent("x", b"1")):
                with pytest.raises(StorageAccessError) as caught:
                    op()
                assert caught.value.reason == "credentials" and f"gs://{gcs_bucket}/t/" in str(caught.value)
            assert proxy.seen and all(refuse(m, p, h) for m, p, h in proxy.seen), "every request carried the token"

    def test_missing_bucket_is_one_error_naming_the_uri(self, gcs_options):
        storage = open_storage("gs://no-such-bucket-seo/t", gcs_options)
        for op in (lambda: storage.read_bytes("x"), lambda: storage.list_dir(""), lambda: storage.put_if_absent("x", b"1")):
            with pytest.raises(StorageAccessError) as caught:
                op()
            assert caught.value.reason == "container"
            assert "gs://no-such-bucket-seo/t" in str(caught.value) and "'no-such-bucket-seo' does not exist" in str(caught.value)

    def test_rename_never_overwrites(self, gcs_storage):
        gcs_storage.put_if_absent("a", b"a")
        gcs_storage.put_if_absent("b", b"b")
        with pytest.raises(FileExistsError):
            gcs_storage.rename("a", "b")
        assert gcs_storage.read_bytes("b") == b"b" and gcs_storage.read_bytes("a") == b"a"


# -- S3 ---------------------------------------------------------------------------------------


@pytest.mark.s3
def test_s3_without_any_credentials_is_one_error_naming_the_table(s3_bucket, moto_endpoint, monkeypatch, tmp_path):
    """botocore finds none: not in storage_options, the environment, the shared files or an
    instance role - ``sink.open()``, the readers and the storage each say so, naming the table."""
    from streaming_exactly_once import ExactlyOnceSink, read

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    options = {"endpoint_url": moto_endpoint, "client_kwargs": {"region_name": "us-east-1"}}
    table = f"s3://{s3_bucket}/events"
    for call in (
        lambda: ExactlyOnceSink(table, storage_options=options).open(),
        lambda: read.arrow(table, storage_options=options),
        lambda: open_storage(table, options).put_if_absent("x", b"1"),
    ):
        with pytest.raises(StorageAccessError) as caught:
            call()
        err = caught.value
        assert err.reason == "credentials" and err.table == table
        assert str(err).startswith(f"Cannot access table {table}: no AWS credentials were found"), str(err)
        assert "AWS_ACCESS_KEY_ID" in str(err)
