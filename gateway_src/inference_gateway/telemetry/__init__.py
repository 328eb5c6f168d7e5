"""Exported metrics: Prometheus series and CloudWatch embedded-metric-format records."""
