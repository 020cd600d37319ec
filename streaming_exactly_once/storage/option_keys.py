"""Storage option keys as users write them, translated to the spelling our backends take.

The backends are fsspec's (s3fs, adlfs, gcsfs) and take their keyword names: ``endpoint_url``,
``key``, ``secret``, ``account_name``, ``token``. Delta users come with delta-rs / object_store
keys (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AZURE_STORAGE_ACCOUNT_NAME``,
``GOOGLE_SERVICE_ACCOUNT``), upper or lower case. Those are translated here, so one dict works
for ``deltalake.DeltaTable(..., storage_options=...)`` and for this library. A key of that style
with no equivalent is refused with a ``ConfigError`` naming it and the spellings that work,
instead of the client's ``TypeError`` about an unexpected keyword argument.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError

#: object_store key (lower case) -> s3fs keyword; ``client_kwargs.region_name`` goes one level down.
_S3 = {
    "aws_endpoint_url": "endpoint_url",
    "aws_endpoint": "endpoint_url",
    "endpoint": "endpoint_url",
    "aws_access_key_id": "key",
    "access_key_id": "key",
    "aws_secret_access_key": "secret",
    "secret_access_key": "secret",
    "aws_session_token": "token",
    "session_token": "token",
    "aws_token": "token",
    "aws_region": "client_kwargs.region_name",
    "aws_default_region": "client_kwargs.region_name",
    "region": "client_kwargs.region_name",
    "aws_profile": "profile",
}
#: Keys that only tune object_store itself and mean nothing here (our S3 storage always creates
#: with ``If-None-Match: *`` and takes ``http://`` from the endpoint): accepted and dropped.
_S3_IGNORED = {"aws_allow_http", "allow_http", "conditional_put", "aws_conditional_put", "aws_s3_allow_unsafe_rename"}
_AZURE = {
    "azure_storage_account_name": "account_name",
    "azure_storage_account_key": "account_key",
    "azure_storage_access_key": "account_key",
    "access_key": "account_key",
    "azure_storage_sas_key": "sas_token",
    "azure_storage_sas_token": "sas_token",
    "sas_key": "sas_token",
    "azure_storage_connection_string": "connection_string",
    "azure_storage_tenant_id": "tenant_id",
    "azure_tenant_id": "tenant_id",
    "azure_storage_client_id": "client_id",
    "azure_client_id": "client_id",
    "azure_storage_client_secret": "client_secret",
    "azure_client_secret": "client_secret",
}
_AZURE_IGNORED = {"azure_allow_http", "allow_http"}
_GCS = {
    "google_service_account": "token",
    "google_service_account_path": "token",
    "service_account": "token",
    "service_account_path": "token",
    "google_service_account_key": "token",
    "service_account_key": "token",
}
_GCS_IGNORED = {"allow_http"}

#: scheme family -> (translations, ignored keys, prefixes that mark the object_store style, what the backend takes)
_FAMILIES: dict[str, tuple[dict[str, str], set[str], tuple[str, ...], str]] = {
    "s3": (_S3, _S3_IGNORED, ("aws_",), "endpoint_url, key, secret, token, profile, client_kwargs={'region_name': ...} (s3fs)"),
    "azure": (
        _AZURE,
        _AZURE_IGNORED,
        ("azure_",),
        "account_name, account_key, sas_token, connection_string, tenant_id, client_id, client_secret (adlfs)",
    ),
    "gcs": (_GCS, _GCS_IGNORED, ("google_", "gcs_"), "token (a service-account file or dict), project (gcsfs)"),
}
_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "az": "azure", "abfs": "azure", "abfss": "azure", "gs": "gcs", "gcs": "gcs"}


def translate_storage_options(scheme: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with delta-rs / object_store keys turned into the backend's own (see the module
    docstring); our own keys pass unchanged. ``ConfigError`` for an object_store-style key this
    library has no equivalent for, naming it and the keys that work."""
    family = _SCHEMES.get(scheme.lower())
    if family is None:
        return dict(options)
    table, ignored, prefixes, spelling = _FAMILIES[family]
    out: dict[str, Any] = {}
    for key, value in options.items():
        low = str(key).lower()
        if low in ignored:
            continue
        target = table.get(low)
        if target is None:
            if low.startswith(prefixes) or (str(key).isupper() and len(str(key)) > 3):
                raise ConfigError(
                    f"storage_options key {key!r} is not known for {scheme}:// tables. This library passes storage "
                    f"options to fsspec; the keys it takes are {spelling}, and the delta-rs spellings "
                    f"{', '.join(sorted(k.upper() for k in table if k.startswith(prefixes)))} are translated.",
                    key=str(key),
                )
            if low == "client_kwargs" and isinstance(out.get("client_kwargs"), Mapping):
                value = {**out["client_kwargs"], **dict(value)}
            out[key] = value
            continue
        if family == "gcs" and low.endswith("_key") and isinstance(value, str):
            try:
                value = json.loads(value)  # object_store takes the key file's JSON text
            except ValueError:
                raise ConfigError(f"storage_options key {key!r} must be the service account's JSON key text", key=str(key)) from None
        if target.startswith("client_kwargs."):
            client_kwargs = dict(out.get("client_kwargs") or options.get("client_kwargs") or {})
            client_kwargs.setdefault(target.split(".", 1)[1], value)
            out["client_kwargs"] = client_kwargs
            continue
        if target in options and options[target] != value:
            raise ConfigError(f"storage_options gives both {key!r} and {target!r} (the same option); give one", key=str(key))
        out[target] = value
    return out
