"""Metrics, lineage and the audit hook of the sinks: what a user watches a stream with.

Off unless a sink's ``metrics`` or ``lineage`` option turns it on (``sink.keywords``); then the
sink builds one ``observer.SinkObserver`` where it writes. ``catalog`` declares every metric
(Prometheus, OpenTelemetry, the docs' table, the alert rules and the dashboard read it);
``store`` holds their values; ``prometheus_export`` and ``otel_export`` export them;
``lineage_*`` send OpenLineage events; ``alerts`` and ``dashboard`` generate the Prometheus
rules and the Grafana dashboard shipped in ``docs/observability/``. prometheus-client,
the OpenTelemetry SDK and openlineage-python (the ``metrics`` and ``lineage`` extras) are
imported only by the modules that export or send.
"""
