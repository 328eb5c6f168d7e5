"""The slow-client and drain defaults every server shares (`igw serve`, `igw global`,
`igw pd-sidecar`), in a module that imports nothing, so a CLI's `--help` shows them
without importing aiohttp (`http_settings.py` and `signals.py` apply them)."""

from __future__ import annotations

__all__ = ["BODY_TIMEOUT_S", "DRAIN_GRACE_S", "HEADER_TIMEOUT_S"]

#: a request head (or the next one on a kept-alive connection) must arrive within this
HEADER_TIMEOUT_S = 15.0
#: a request body must arrive within this of its head
BODY_TIMEOUT_S = 15.0
#: on a stop signal, requests in flight may finish for this long (below Kubernetes'
#: default terminationGracePeriodSeconds of 30 s plus the preStop margin)
DRAIN_GRACE_S = 30.0
