"""The table layer: layout of a table directory and the sink's own logs under ``_seo/``."""

from .commits_log import CommitRecord, CommitsLog
from .identity import TableIdentity, ensure_identity, read_identity
from .offsets_log import OffsetsLog, OffsetsRecord
from .sources_log import SourceFileRecord, SourcesLog
from .table_logs import TableLogs

__all__ = [
    "CommitRecord",
    "CommitsLog",
    "OffsetsLog",
    "OffsetsRecord",
    "SourceFileRecord",
    "SourcesLog",
    "TableIdentity",
    "TableLogs",
    "ensure_identity",
    "read_identity",
]
