"""The table formats a batch is also committed to (Delta Lake, Apache Iceberg), behind one seam.

``base.TableFormat`` is what the layers above ask of a format's table, whatever the format:
which batch it holds, the files it reads, its status. ``registry.FORMATS`` names each format
once - its ``format=`` name, the extra it needs, the error its table raises and where its
implementation is - and loads that implementation on first use, so that a missing extra is a
``MissingDependencyError`` naming the ``pip install`` line. Each format's own package
(``delta``, ``iceberg``) implements the protocol; ``formats.delta`` and ``formats.iceberg``
open a table's format from its identity.
"""
