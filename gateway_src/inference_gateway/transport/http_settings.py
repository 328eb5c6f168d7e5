"""The rules every `igw` HTTP server follows (`igw serve`, `igw global`): deadlines for
request heads and bodies, quiet logs for clients that misbehave or leave. The signal and
drain rules are in transport/signals.py.

Header deadline. aiohttp's server has one timer for a connection that is not running a
request, `keepalive_timeout`: armed when the connection opens and when a response ends,
not extended by bytes of an incomplete head, so it is the deadline for a whole request
head (a slow client, slowloris) as well as for an idle keep-alive connection. `aiohttp.
web.run_app` sets it to 75 s and `AppRunner` to an hour; we set `HEADER_TIMEOUT_S`. A
load balancer in front must close idle connections sooner (an AWS ALB's idle timeout
defaults to 60 s: lower it, or raise `--header-timeout`), or it may send a request on a
connection the gateway is closing; the `openai` SDK's client (httpx) drops idle
connections after 5 s itself.

Body deadline. Once the head is in, aiohttp runs the handler and no timer covers the
body: a client that trickles its body one byte a second holds a handler, a socket and
a buffer for as long as it likes. `body_deadline` (a middleware, the first of the app)
reads the whole body within `BODY_TIMEOUT_S` of the head, then hands it to the handler
(aiohttp keeps it: `request.read()` there returns it without waiting); past the
deadline the client gets 408 and the connection closes. A body already complete when
the handler starts (most: one packet with the head) is read without arming the timer,
which cost about 3% of a proxied request's CPU. A body over the app's
`client_max_size` is a 413 there too, so every server answers both alike.

Logs. aiohttp logs a traceback for every malformed request (`BadHttpMessage`) and for
every handler that writes to a client that has gone (a hang-up mid-stream): thousands
of lines for a burst of either, and neither is the server's fault. `ClientErrorLog`
counts malformed requests by the parser's error class and writes at most one INFO
line per 10 s summing them (telemetry/tally.py: a client can send them at will), and
one DEBUG line for a client that left (any `ConnectionError`); every other exception
keeps its traceback. The parser's own message is never logged: it quotes the bytes it
choked on, an `Authorization` header's first hundred characters among them.

Request heads. A header value may be up to `MAX_HEADER_VALUE_BYTES` (17 KiB: a 16 KiB
bearer token, which identity providers' JWTs with many groups reach, and its scheme;
aiohttp's default is 8,190). aiohttp answers a head it cannot parse with a plain-text
400 quoting the offending bytes; `GatewayAppRunner` (the runner every `igw` HTTP
server uses, `signals.serve_http`) answers it in OpenAI's error shape with a fixed
text instead: 431 for a header line too long (RFC 6585), 400 otherwise, the
connection closed.

SSE errors: a stream that cannot go on ends with the event of the one answer relay
(core/request/relay.py `stream_error_event`), whose texts are fixed.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from inference_gateway.telemetry.tally import Tally
from inference_gateway.transport.defaults import BODY_TIMEOUT_S, HEADER_TIMEOUT_S

__all__ = [
    "BODY_TIMEOUT_S",
    "HEADER_TIMEOUT_S",
    "MAX_HEADER_VALUE_BYTES",
    "ClientErrorLog",
    "GatewayAppRunner",
    "body_deadline",
    "server_settings",
]

MAX_HEADER_VALUE_BYTES = 17 * 1024


log = logging.getLogger("inference_gateway.transport.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ClientErrorLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The logger aiohttp's request handler writes through (its `logger` setting)."""

    def __init__(self, logger: logging.Logger, extra: Any = None) -> None:
        super().__init__(logger, extra or {})
        self.malformed = Tally(logger, "malformed requests")

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        return msg, kwargs

    def exception(self, msg: object, *args: object, **kwargs: Any) -> None:
        error = kwargs.get("exc_info")
        if isinstance(error, HttpProcessingError):
            self.malformed.record(f"{error.code} {type(error).__name__}")
        elif isinstance(error, ConnectionError):
            self.logger.debug("the client left before its response was written: %s", error)
        else:
            self.logger.exception(msg, *args, **kwargs)


def server_settings(header_timeout_s: float = HEADER_TIMEOUT_S) -> dict[str, Any]:
    """Keyword arguments for `GatewayAppRunner` (or `aiohttp.web.AppRunner`)."""
    if header_timeout_s <= 0:
        raise ValueError("the header timeout must be positive")
    return {
        "keepalive_timeout": header_timeout_s,
        "logger": ClientErrorLog(log),
        "max_field_size": MAX_HEADER_VALUE_BYTES,
    }


class _QuietRequestHandler(RequestHandler):
    """aiohttp's connection handler, answering what it cannot parse without quoting it."""

    __slots__ = ()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        super().handle_error(request, status, exc, None)  # logs; raises once bytes went out
        if isinstance(exc, LineTooLong):
            status, text = 431, "A request header is too large."
        elif status < 500:
            text = "The request could not be parsed."
        else:
            text = "The server failed to handle the request."
        code = "request_header_fields_too_large" if status == 431 else f"http_{status}"
        body = {"error": {"message": text, "type": "invalid_request_error", "param": None}}
        body["error"]["code"] = code
        response = web.Response(status=status, body=orjson.dumps(body))
        response.content_type = "application/json"
        response.force_close()
        return response


class _QuietServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _QuietRequestHandler(self, loop=self._loop, **self._kwargs)


class GatewayAppRunner(web.AppRunner):
    """`aiohttp.web.AppRunner` whose connections answer an unparsable request in OpenAI's
    error shape, never quoting it (module docstring)."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _QuietServer  # the same object; only its handler class differs
        return server


async def _refuse(
    request: web.Request, status: int, message: str, kind: str, code: str
) -> web.StreamResponse:
    """Answer now and close the connection: what is left of the body is never read
    (aiohttp would otherwise keep reading it for up to 10 s, its lingering close)."""
    body = orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})
    # the client's request id echoed (or one made), as every other answer carries one
    request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
    response = web.Response(
        status=status,
        body=body,
        content_type="application/json",
        headers={"x-request-id": request_id},
    )
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    if request.protocol is not None:
        request.protocol.force_close()  # the transport flushes the answer, then closes
    return response


def body_deadline(timeout_s: float = BODY_TIMEOUT_S) -> Any:
    """The middleware that reads every request body within `timeout_s` (408 past it,
    413 over the app's `client_max_size`), before any handler runs."""
    if timeout_s <= 0:
        raise ValueError("the body timeout must be positive")

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.body_exists:
            try:
                if request.content.is_eof():  # all in (the common case): read() cannot wait
                    await request.read()
                else:
                    async with asyncio.timeout(timeout_s):
                        await request.read()
            except TimeoutError:
                log.info("request body not complete after %g s: 408, connection closed", timeout_s)
                return await _refuse(
                    request,
                    408,
                    f"The request body did not arrive within {timeout_s:g} s.",
                    "invalid_request_error",
                    "request_timeout",
                )
            except web.HTTPRequestEntityTooLarge:
                return await _refuse(
                    request,
                    413,
                    f"Request body exceeds {request.client_max_size} bytes.",
                    "invalid_request_error",
                    "request_too_large",
                )
        return await handler(request)

    return middleware
