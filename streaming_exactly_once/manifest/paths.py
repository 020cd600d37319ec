"""Partition directory names and manifest path strings, byte-compatible with Spark and Hadoop.

Two encodings stack (verified against Spark 4.3's file sink, see ``tests/manifest``):

1. **On disk**, a partition value is Hive-escaped: the characters ``"#%'*/:=?\\{[]^``, DEL and
   the controls 0x01-0x1F become ``%XX`` (uppercase hex); an empty or null value becomes
   ``__HIVE_DEFAULT_PARTITION__``. ``p = "c%d"`` is stored in directory ``p=c%25d``.
2. **In the manifest**, the fully-qualified path is URI-encoded as Hadoop's
   ``new Path(p).toUri.toString`` does (``java.net.URI``'s multi-argument constructor): every
   character outside ``A-Za-z0-9 -_.!~*'() ,;:$&+= /@`` and outside non-ASCII letters is
   ``%XX``-encoded per UTF-8 byte, ``%`` included. So directory ``N out dir/p=c%25d`` appears
   as ``N%20out%20dir/p=c%2525d`` while ``é`` stays raw.

One location has several spellings, and manifests hold whichever the writer used:
``file:/x``, ``file:///x`` and ``file://localhost/x`` are one local file; ``s3://``, ``s3a://``
and ``s3n://`` are one bucket (Hadoop's connectors and s3fs), ``abfs://``, ``abfss://`` and
``az://`` one Azure container, ``gs://`` and ``gcs://`` one GCS bucket. ``canonical_uri`` picks one
spelling and ``spellings`` lists them all, so a table root matches entries written either way.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from urllib.parse import unquote

DEFAULT_PARTITION_NAME = "__HIVE_DEFAULT_PARTITION__"

_HIVE_ESCAPED = frozenset([chr(c) for c in range(0x01, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))

_URI_PATH_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.!~*'(),;:$&+=/@")

#: A path made only of these characters is its own encoding (most are: the commit path
#: encodes every file's URI, and a per-character loop is ~20 us a path).
_ALL_SAFE = re.compile("[" + re.escape("".join(sorted(_URI_PATH_SAFE))) + "]*")


def hive_escape(value: str) -> str:
    """A partition value as Spark names its directory component."""
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPED else c for c in value)


def hive_unescape(text: str) -> str:
    """Inverse of ``hive_escape``: ``%XX`` with two hex digits becomes that character."""
    out = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "%" and i + 2 < n and _is_hex(text[i + 1 : i + 3]):
            out.append(chr(int(text[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _is_hex(s: str) -> bool:
    return len(s) == 2 and all(ch in "0123456789abcdefABCDEF" for ch in s)


def partition_dir(values: Sequence[tuple[str, str | None]]) -> str:
    """``[("day", "2024-01-01"), ("p", "a b")]`` -> ``day=2024-01-01/p=a b``."""
    parts = []
    for column, value in values:
        text = DEFAULT_PARTITION_NAME if value is None or value == "" else hive_escape(value)
        parts.append(f"{hive_escape(column)}={text}")
    return "/".join(parts)


def parse_partition_dir(relative_dir: str) -> list[tuple[str, str | None]]:
    """``day=2024-01-01/p=a b`` -> pairs; components without ``=`` are not partitions."""
    pairs: list[tuple[str, str | None]] = []
    for component in relative_dir.strip("/").split("/"):
        if "=" not in component:
            continue
        column, _, raw = component.partition("=")
        value = None if raw == DEFAULT_PARTITION_NAME else hive_unescape(raw)
        pairs.append((hive_unescape(column), value))
    return pairs


def _uri_char_is_legal(c: str) -> bool:
    if c in _URI_PATH_SAFE:
        return True
    code = ord(c)
    if code < 0x80:
        return False
    if code <= 0x9F:  # ISO control characters 0x80-0x9F
        return False
    return unicodedata.category(c) not in ("Zs", "Zl", "Zp")  # Java's isSpaceChar


def encode_path(path: str) -> str:
    """Quote a path component string the way ``java.net.URI`` does (see module docstring)."""
    if _ALL_SAFE.fullmatch(path):
        return path
    out = []
    for c in path:
        if _uri_char_is_legal(c):
            out.append(c)
        else:
            out.extend(f"%{b:02X}" for b in c.encode("utf-8"))
    return "".join(out)


def split_uri(uri: str) -> tuple[str, str]:
    """``scheme://authority`` prefix and the path: ``file:///a/b`` -> (``file://``, ``/a/b``)."""
    if "://" in uri:
        scheme, rest = uri.split("://", 1)
        slash = rest.find("/")
        if slash < 0:
            return f"{scheme}://{rest}", ""
        return f"{scheme}://{rest[:slash]}", rest[slash:]
    if ":" in uri.split("/", 1)[0]:
        scheme, rest = uri.split(":", 1)
        return f"{scheme}:", rest
    return "", uri


def encode_uri(uri: str) -> str:
    """An unencoded fully-qualified URI as Hadoop's ``Path.toUri.toString`` prints it."""
    prefix, path = split_uri(uri)
    return prefix + encode_path(path)


def decode_uri(uri: str) -> str:
    """A manifest path back to the unencoded URI (inverse of ``encode_uri``)."""
    prefix, path = split_uri(uri)
    return prefix + unquote(path, encoding="utf-8", errors="strict")


#: Schemes that name the same object store as another one (Hadoop's connectors for S3; adlfs
#: reads ``az://`` and ``abfs[s]://`` alike; gcsfs ``gs://`` and ``gcs://``).
_SAME_STORE = {"s3a": "s3", "s3n": "s3", "abfss": "abfs", "az": "abfs", "gcs": "gs"}


def canonical_uri(uri: str) -> str:
    """One spelling per location: ``file:///x`` for local files, ``s3://`` for S3; no trailing ``/``."""
    uri = normalize_uri(uri)
    scheme, sep, rest = uri.partition("://")
    if sep:
        scheme = scheme.lower()
        uri = f"{_SAME_STORE.get(scheme, scheme)}://{rest}"
    return uri.rstrip("/") if not uri.endswith("://") else uri


def root_prefix(root_uri: str) -> str:
    """The canonical spelling of a table root, with the ``/`` its files' URIs continue with."""
    return canonical_uri(root_uri).rstrip("/") + "/"


def relative_to_root(root_uri: str, uri: str) -> str | None:
    """``uri`` relative to the table rooted at ``root_uri`` (either in any spelling); None if elsewhere."""
    root, uri = root_prefix(root_uri), canonical_uri(uri)
    return uri[len(root) :] if uri.startswith(root) else None


def spellings(uri: str) -> list[str]:
    """Every spelling of ``uri`` a manifest may hold (the canonical one first)."""
    canonical = canonical_uri(uri)
    scheme, _, rest = canonical.partition("://")
    if scheme == "file":
        return [canonical, f"file:{rest}", f"file://localhost{rest}"]
    same = [s for s, target in _SAME_STORE.items() if target == scheme]
    return [canonical] + [f"{s}://{rest}" for s in same]


def normalize_uri(uri: str) -> str:
    """``file:/x`` and ``file:///x`` name the same file; compare URIs in the ``file:///`` form."""
    if uri.startswith("file:") and not uri.startswith("file://"):
        return "file://" + uri[len("file:") :]
    if uri.startswith("file://localhost/"):
        return "file:///" + uri[len("file://localhost/") :]
    return uri
