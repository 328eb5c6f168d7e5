"""`igw pd-sidecar`: the decode pod's routing sidecar for P/D through Envoy.

llm-d's convention (llm-d/llm-d-routing-sidecar `internal/proxy/chat_completions.go`,
`proxy.go`): the endpoint picker names the decode pod as Envoy's destination and the
prefill pod in the request header `x-prefiller-host-port`; a sidecar on the decode pod
(the InferencePool's target port) runs the prefill leg there and then sends the
request to its local decoder (vLLM on localhost). Here the sidecar is this module over
the one prefill exchange (`frontends/pd_exchange.py`, the same object `igw serve` runs):

* `POST /v1/chat/completions`, `/v1/completions` with the header: the prefill leg on the
  named pod, then the decode leg on the decoder (its answer relayed as it streams); a
  failed prefill leg is served aggregated by the decoder. Without the header: straight
  to the decoder (llm-d's "skip disaggregated prefill").
* SSRF: the header must be exactly `ip:port` (`[ipv6]:port`), no name, a port 1-65535,
  and the address inside one of the `--allow-prefill` CIDRs. Anything else is answered
  403, as llm-d's sidecar answers a target outside its allowlist ("Forbidden: prefill
  target not allowed by SSRF protection"), with an OpenAI-shaped body; it is never
  dialled. llm-d takes the first of comma-separated values; so do we.
* The header (and llm-d's older `x-prefiller-url`) never reaches the decoder, nor do a
  client's `kv_transfer_params` (pd_body.py), with or without a prefill leg. The prefill
  pod's params reach it only when they name that pod (`remote_host` the address dialled,
  `remote_port` its port or a NIXL side-channel port, `--nixl-side-channel-ports`) and
  hold sane values (pd_body.checked_params); anything else is served aggregated, so a
  prefill pod cannot steer the decoder past the allowlist. A decoder that still answers
  400 to the params (a version skew) gets the request again without them, aggregated.
* Before a prefill leg the decoder's `/health` must answer 200 (a success is trusted for
  `DECODER_CHECK_TTL_S`): a prefill pod keeps a finished leg's KV blocks until a decoder
  reads them, and vLLM offers no call that frees them (only a decoder's NIXL read or
  notification does, or `VLLM_NIXL_ABORT_REQUEST_TIMEOUT`, 480 s, vllm PRs #19223,
  #20139), so a leg whose decoder is down would pin them for minutes. A decoder that is
  down gets no prefill leg; the request goes to it as is and the client gets its 502.
* Every other path (`/metrics`, `/health`, `/v1/models`, ...) passes through to the
  decoder, so the picker scrapes the decode engine at the pod's one port.
  `/healthz` and `/readyz` are the sidecar's own probes (200 once it listens; the
  decoder container has its own).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from inference_gateway.core.request.contracts import openai_error
from inference_gateway.core.request.pd_body import (
    LEGACY_PREFILL_HEADER,
    NIXL_SIDE_CHANNEL_PORT,
    PREFILL_HEADER,
    without_client_params,
)
from inference_gateway.core.request.relay import StreamEnd, StreamRelay, is_event_stream
from inference_gateway.errors import InferenceGatewayError
from inference_gateway.frontends.client_stream import LazyClientStream
from inference_gateway.frontends.pd_exchange import PREFILL_TIMEOUT_S, PrefillExchange
from inference_gateway.frontends.tracing_http import SPAN, server_span
from inference_gateway.telemetry.tracing import Tracing
from inference_gateway.transport.http1_client import (
    Upstream,
    UpstreamError,
    UpstreamResponse,
    UpstreamTimeout,
)
from inference_gateway.transport.http_settings import body_deadline

__all__ = [
    "LEGACY_PREFILL_HEADER",
    "PREFILL_HEADER",
    "PrefillAllowlist",
    "PrefillRefused",
    "Sidecar",
]

log = logging.getLogger(__name__)

COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions")
MAX_BODY_BYTES = 4 * 2**20  # the picker's own request limit
#: How long a decoder's good `/health` is trusted before a prefill leg (one loopback GET
#: a second at most, whatever the request rate); a failed check is never cached.
DECODER_CHECK_TTL_S = 1.0
DECODER_CHECK_TIMEOUT_S = 1.0
#: Never forwarded: hop-by-hop (RFC 9110 §7.6.1), framing the client re-sets, and the
#: P/D headers the sidecar consumes.
_DROPPED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        PREFILL_HEADER,
        LEGACY_PREFILL_HEADER,
    }
)
_ANSWER_DROPPED = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "date", "server"}
)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_PROBES = ("/healthz", "/readyz")
_PORT = re.compile(r"[0-9]{1,5}")


class PrefillRefused(InferenceGatewayError):
    """The header names nothing the sidecar may dial (the reason is logged, not sent)."""


@dataclass(frozen=True, slots=True)
class PrefillAllowlist:
    """The CIDRs a prefill pod may be in (`--allow-prefill`); empty allows none."""

    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]

    @classmethod
    def parse(cls, cidrs: Iterable[str]) -> PrefillAllowlist:
        """ValueError names a bad CIDR (host bits set count as bad: say what you mean)."""
        return cls(tuple(ipaddress.ip_network(c.strip(), strict=True) for c in cidrs))

    def target(self, value: str) -> tuple[str, int]:
        """The (address, port) the header allows dialling; `PrefillRefused` otherwise."""
        first = value.split(",", 1)[0].strip()
        if first.startswith("["):
            host, sep, port = first[1:].partition("]:")
        else:
            host, sep, port = first.rpartition(":")
        if not sep or not _PORT.fullmatch(port) or not 0 < int(port) < 65536:
            raise PrefillRefused(f"not ip:port: {first[:80]!r}")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise PrefillRefused(f"not an IP address: {host[:80]!r}") from None
        if not any(address in network for network in self.networks):
            raise PrefillRefused(f"{address} is outside --allow-prefill")
        return str(address), int(port)


def _forward_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower() not in _DROPPED}


def _error(status: int, message: str, kind: str, code: str) -> web.Response:
    return web.Response(
        status=status, body=openai_error(message, kind, code), content_type="application/json"
    )


class Sidecar:
    """The sidecar's app over a decoder URL, an allowlist and the prefill exchange."""

    def __init__(
        self,
        decoder: str,
        allowlist: PrefillAllowlist,
        *,
        prefill_timeout_s: float = PREFILL_TIMEOUT_S,
        read_timeout_s: float = 300.0,
        side_channel_ports: Iterable[int] = (NIXL_SIDE_CHANNEL_PORT,),
        tracing: Tracing | None = None,
    ) -> None:
        self.tracing = tracing or Tracing.off()
        url = urlsplit(decoder)
        if url.scheme != "http" or not url.hostname or url.path not in ("", "/"):
            raise ValueError(f"--decoder must be http://HOST:PORT, got {decoder!r}")
        self.decoder = (url.hostname, url.port or 80)
        self.allowlist = allowlist
        self.prefill_timeout_s = prefill_timeout_s
        self.read_timeout_s = read_timeout_s
        self.side_channel_ports = tuple(side_channel_ports)
        self.relay = StreamRelay()
        self.exchange: PrefillExchange | None = None
        self.upstream: Upstream | None = None
        self.refused = 0  # headers refused by the allowlist, since start
        self.decoder_down = 0  # prefill legs not run: the decoder's /health failed
        self.params_refused = 0  # decode legs retried aggregated after a 400
        self.active = 0  # requests in flight (a drain waits for 0)
        self._decoder_good_until = 0.0

    def app(self) -> web.Application:
        traced = server_span(self.tracing, "igw.pd-sidecar", skip=frozenset(_PROBES))
        app = web.Application(
            client_max_size=MAX_BODY_BYTES, middlewares=[self._count, traced, body_deadline()]
        )
        for path in COMPLETION_PATHS:
            app.router.add_post(path, self.completions)
        app.router.add_get("/healthz", self.probe)
        app.router.add_get("/readyz", self.probe)
        app.router.add_route("*", "/{tail:.*}", self.passthrough)
        app.on_startup.append(self._startup)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _startup(self, app: web.Application) -> None:
        self.upstream = Upstream(read_timeout_s=self.read_timeout_s)
        self.exchange = PrefillExchange(
            timeout_s=self.prefill_timeout_s, side_channel_ports=self.side_channel_ports
        )

    async def _cleanup(self, app: web.Application) -> None:
        for part in (self.upstream, self.exchange):
            if part is not None:
                await part.close()
        await self.tracing.close()

    @web.middleware
    async def _count(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.active += 1
        try:
            return await handler(request)
        finally:
            self.active -= 1

    async def probe(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        assert self.exchange is not None
        raw = without_client_params(await request.read())
        headers = _forward_headers(request.headers)  # traceparent and tracestate pass on
        span = request.get(SPAN)
        if span is not None:  # this server's span is the legs' parent
            self.tracing.inject(span, headers)
        value = request.headers.get(PREFILL_HEADER, "").strip()
        if value:
            try:
                host, port = self.allowlist.target(value)
            except PrefillRefused as refusal:
                self.refused += 1
                log.warning("refused %s (SSRF allowlist): %s", PREFILL_HEADER, refusal)
                return _error(
                    403,
                    "Forbidden: the prefill target is not allowed.",
                    "invalid_request_error",
                    "prefill_target_forbidden",
                )
            if await self._decoder_ready():
                leg = await self.exchange.run(host, port, request.path, raw, headers)
                if leg.ok:  # a decoder that refuses the params gets the request without
                    return await self._decode(request, leg.body, headers, aggregated=raw)
                raw = leg.body
            else:
                self.decoder_down += 1
                log.warning("the decoder is not healthy: no prefill leg (it would pin KV)")
        return await self._decode(request, raw, headers)

    async def _decoder_ready(self) -> bool:
        """The decoder's `/health` answers 200 (module docstring)."""
        assert self.upstream is not None
        if time.monotonic() < self._decoder_good_until:
            return True
        host, port = self.decoder
        try:
            async with asyncio.timeout(DECODER_CHECK_TIMEOUT_S):
                await self.upstream.get_text(host, port, "/health", limit=64 * 1024)
        except (TimeoutError, UpstreamError):
            return False
        self._decoder_good_until = time.monotonic() + DECODER_CHECK_TTL_S
        return True

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        body = await request.read() if request.body_exists else None
        return await self._forward(
            request, request.method, request.path_qs, body, _forward_headers(request.headers)
        )

    async def _decode(
        self,
        request: web.Request,
        body: bytes,
        headers: dict[str, str],
        *,
        aggregated: bytes | None = None,
    ) -> web.StreamResponse:
        """The decode leg; with `aggregated` (the body without the prefill pod's params),
        a 400 to the params is answered by sending that instead."""
        headers["content-type"] = "application/json"
        return await self._forward(
            request, "POST", request.path_qs, body, headers, aggregated=aggregated
        )

    async def _forward(
        self,
        request: web.Request,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        *,
        aggregated: bytes | None = None,
    ) -> web.StreamResponse:
        assert self.upstream is not None
        host, port = self.decoder
        if method == "POST":
            pending = self.upstream.post(host, port, path, body or b"", headers)
        elif method == "GET":
            pending = self.upstream.get(host, port, path, headers)
        else:
            return _error(405, "Method not allowed.", "invalid_request_error", "method_not_allowed")
        try:
            answer = await pending.response()
        except UpstreamTimeout:
            return _error(504, "The decoder sent nothing in time.", "upstream_error", "timeout")
        except UpstreamError as error:
            log.warning("decoder %s:%d: %s", host, port, error)
            return _error(502, "The decoder is unreachable.", "upstream_error", "decoder_down")
        except BaseException:
            pending.abandon()
            raise
        if aggregated is not None and answer.status == 400:
            answer.release()  # not reusable unread: the connection closes
            self.params_refused += 1
            log.warning("the decoder refused the prefill pod's params: serving aggregated")
            return await self._forward(request, method, path, aggregated, headers)
        try:
            return await self._relay(request, answer)
        finally:
            answer.release()

    async def _relay(self, request: web.Request, answer: UpstreamResponse) -> web.StreamResponse:
        out = {k: v for k, v in answer.headers.items() if k not in _ANSWER_DROPPED}
        if not is_event_stream(answer.headers.get("content-type", "")):
            try:
                body = await answer.read()
            except UpstreamError as error:
                log.warning("the decoder's answer broke: %s", error)
                return _error(502, "The decoder's answer broke.", "upstream_error", "broken")
            return web.Response(status=answer.status, body=body, headers=out)
        client = LazyClientStream(request, web.StreamResponse(status=answer.status, headers=out))
        relayed = await self.relay.pump(answer.chunks(), client)
        if relayed.end is StreamEnd.COMPLETE or relayed.end is StreamEnd.CLIENT_LEFT:
            return client.response
        log.warning("the decoder's stream ended early: %s", relayed.end.value)
        if not relayed.started:  # no byte sent yet: a plain error status still can be
            return _error(502, "The decoder's answer broke.", "upstream_error", "broken")
        return client.response  # ended with the relay's SSE error event
