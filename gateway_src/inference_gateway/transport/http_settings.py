"""`igw serve`'s aiohttp server settings: a deadline for request heads and quiet logs.

Deadline. aiohttp's server has one timer for a connection that is not running a
request, `keepalive_timeout`: armed when the connection opens and when a response ends,
not extended by bytes of an incomplete head, so it is the deadline for a whole request
head (a slow client, slowloris) as well as for an idle keep-alive connection. `aiohttp.
web.run_app` sets it to 75 s and `AppRunner` to an hour; we set `HEADER_TIMEOUT_S`. A
load balancer in front must close idle connections sooner (an AWS ALB's idle timeout
defaults to 60 s: lower it, or raise `--header-timeout`), or it may send a request on a
connection the gateway is closing; the `openai` SDK's client (httpx) drops idle
connections after 5 s itself.

Logs. aiohttp logs a traceback for every malformed request (`BadHttpMessage`) and for
every handler that writes to a client that has gone (a hang-up mid-stream): thousands
of lines for a burst of either, and neither is the gateway's fault. `ClientErrorLog`
writes one line for a malformed request (INFO, with the peer and the parser's reason)
and one DEBUG line for a client that left; every other exception keeps its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

__all__ = ["HEADER_TIMEOUT_S", "ClientErrorLog", "server_settings"]

HEADER_TIMEOUT_S = 15.0

log = logging.getLogger("inference_gateway.transport.http")


class ClientErrorLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The logger aiohttp's request handler writes through (its `logger` setting)."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        return msg, kwargs

    def exception(self, msg: object, *args: object, **kwargs: Any) -> None:
        error = kwargs.get("exc_info")
        if isinstance(error, HttpProcessingError):
            reason = " ".join(str(error.message).split())[:200]
            self.logger.info("malformed request (%s): %s", error.code, reason)
        elif isinstance(error, ConnectionResetError):
            self.logger.debug("the client left before its response was written: %s", error)
        else:
            self.logger.exception(msg, *args, **kwargs)


def server_settings(header_timeout_s: float = HEADER_TIMEOUT_S) -> dict[str, Any]:
    """Keyword arguments for `aiohttp.web.run_app` / `AppRunner`."""
    if header_timeout_s <= 0:
        raise ValueError("the header timeout must be positive")
    return {"keepalive_timeout": header_timeout_s, "logger": ClientErrorLog(log, {})}
