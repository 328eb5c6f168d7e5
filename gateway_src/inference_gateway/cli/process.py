"""How every `igw` server process starts (serve, picker, bbr, auth, global, pd-sidecar):
one INFO line per event on stderr (a drain, a store fallback, a reload; never a
traceback per client), and uvloop's event loop (a pinned dependency)."""

from __future__ import annotations

import logging

import uvloop

__all__ = ["LOG_FORMAT", "start_server_process"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def start_server_process() -> None:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    uvloop.install()
