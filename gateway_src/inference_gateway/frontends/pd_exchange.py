"""The prefill leg of disaggregated serving, for every driver that runs it: `igw serve`
(frontends/proxy.py) and `igw pd-sidecar` (frontends/pd_sidecar.py) call this one object.

`PrefillExchange.run` takes the client's body and a prefill pod, sends the prefill leg
(core/request/pd_body.py: vLLM's toy proxy shape, not streamed, one output token) and
returns what the decode pod must be sent: the client's body with the prefill pod's
`kv_transfer_params`, or, when the leg fails, the client's body alone, which the decode
pod then serves aggregated (it prefills the prompt itself). The leg fails on a connect
error, an answer other than 200, an answer without `kv_transfer_params`, params a
decode pod must not get (`bad_params`: not naming the pod the leg went to, too many
block ids, wrong types: `pd_body.checked_params`), a broken or unreadable answer, or no
answer within `timeout_s`; each failure is logged (one line) and counted by reason
(`counts`, and the `on_outcome` hook the owner turns into a metric). vLLM's toy proxy
(vllm `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`) raises on a failed
prefill and llm-d's sidecar answers the prefill pod's status
(llm-d/llm-d-routing-sidecar `internal/proxy/connector_nixlv2.go`);
we serve the request aggregated instead, since the decode pod can always do the whole
request, and a client should not see an error for a pod it never chose.

A client's own `kv_transfer_params` never reach either leg (`pd_body.strip_client_params`).
A client that leaves during the leg cancels it: the prefill connection is closed, so
the prefill engine aborts the request (and frees its blocks) as vLLM does for any
client that disconnects.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from inference_gateway.core.request.pd_body import (
    NIXL_SIDE_CHANNEL_PORT,
    BadParams,
    checked_params,
    decode_body,
    prefill_body,
    prefill_params,
    strip_client_params,
)
from inference_gateway.transport.http1_client import (
    Upstream,
    UpstreamConnectError,
    UpstreamError,
    UpstreamTimeout,
)

__all__ = ["PREFILL_TIMEOUT_S", "PrefillExchange", "PrefillOutcome"]

log = logging.getLogger(__name__)

#: The longest a prefill leg may take, connect to last byte: a long prompt's prefill
#: on a busy pod takes seconds, never minutes; past this the decode pod does it.
PREFILL_TIMEOUT_S = 60.0
#: A prefill leg's answer is one small JSON document (one token and the params).
MAX_ANSWER_BYTES = 4 * 2**20

OK = "ok"


@dataclass(frozen=True, slots=True)
class PrefillOutcome:
    """What the decode pod is sent, and how the prefill leg went."""

    body: bytes  # the decode leg's body (aggregated: the client's, stripped)
    outcome: str  # OK, or why the leg failed: connect_error, http_503, no_params, ...
    seconds: float  # how long the leg took (its TTFT when it succeeded)

    @property
    def ok(self) -> bool:
        return self.outcome == OK


class PrefillExchange:
    """Runs prefill legs over its own keep-alive client (its read timeout is the leg's,
    not the decode stream's)."""

    def __init__(
        self,
        *,
        timeout_s: float = PREFILL_TIMEOUT_S,
        connect_timeout_s: float = 5.0,
        on_outcome: Callable[[str], None] | None = None,
        side_channel_ports: Collection[int] = (NIXL_SIDE_CHANNEL_PORT,),
    ) -> None:
        """`side_channel_ports`: where the prefill pods' NIXL handshake may listen
        (`remote_port`; the pod's own serving port is always allowed)."""
        if not timeout_s > 0:
            raise ValueError("the prefill timeout must be positive")
        self.timeout_s = timeout_s
        self.side_channel_ports = frozenset(side_channel_ports)
        self.upstream = Upstream(
            connect_timeout_s=min(connect_timeout_s, timeout_s),
            read_timeout_s=timeout_s,
            max_body_bytes=MAX_ANSWER_BYTES,
        )
        self.on_outcome = on_outcome
        self.counts: Counter[str] = Counter()  # outcome → legs, since start

    async def close(self) -> None:
        await self.upstream.close()

    async def run(
        self,
        host: str,
        port: int,
        path: str,
        client_body: bytes | dict[str, Any],
        headers: Mapping[str, str],
    ) -> PrefillOutcome:
        """The prefill leg to `host:port`; the decode leg's body either way."""
        started = time.monotonic()
        try:
            body = orjson.loads(client_body) if isinstance(client_body, bytes) else client_body
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):  # the decode pod answers 400 for it
            raw = client_body if isinstance(client_body, bytes) else b""
            return self._done(raw, "malformed_body", started, host, port)
        body = dict(body)
        strip_client_params(body)
        params: dict[str, Any] | None = None
        try:
            async with asyncio.timeout(self.timeout_s):
                params, outcome = await self._leg(host, port, path, body, headers)
        except (TimeoutError, UpstreamTimeout):
            outcome = "timeout"
        except UpstreamConnectError:
            outcome = "connect_error"
        except UpstreamError:
            outcome = "broken"
        if params is None:
            return self._done(orjson.dumps(body), outcome, started, host, port)
        return self._done(orjson.dumps(decode_body(body, params)), OK, started, host, port)

    async def _leg(
        self,
        host: str,
        port: int,
        path: str,
        body: dict[str, Any],
        headers: Mapping[str, str],
    ) -> tuple[dict[str, Any] | None, str]:
        pending = self.upstream.post(host, port, path, orjson.dumps(prefill_body(body)), headers)
        try:
            response = await pending.response()
        except BaseException:
            pending.abandon()
            raise
        try:
            answer = await response.read()
        finally:
            response.release()
        if response.status != 200:
            return None, f"http_{response.status}"
        params = prefill_params(answer)
        if params is None:
            return None, "no_params"
        try:
            return checked_params(params, host, port, self.side_channel_ports), OK
        except BadParams as refusal:
            log.warning("prefill pod %s:%d: kv_transfer_params refused: %s", host, port, refusal)
            return None, "bad_params"

    def _done(
        self, body: bytes, outcome: str, started: float, host: str, port: int
    ) -> PrefillOutcome:
        self.counts[outcome] += 1
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        if outcome != OK:
            log.warning(
                "prefill leg to %s:%d failed (%s): serving the request aggregated",
                host,
                port,
                outcome,
            )
        return PrefillOutcome(body, outcome, time.monotonic() - started)
