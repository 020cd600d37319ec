# Look at a table, check it, preview and run garbage collection (no Spark, no JVM).
seo status /tmp/seo-example/events
seo log /tmp/seo-example/events
seo verify /tmp/seo-example/events
seo gc /tmp/seo-example/events --dry-run
seo recover /tmp/seo-example/events
seo --json status /tmp/seo-example/events > /tmp/seo-example/status.json
