"""The body rules of disaggregated prefill/decode (vLLM NixlConnector), in one place.

A P/D request is served in two legs, both built from the client's body:

* the **prefill leg** goes to the prefill pod, not streamed, capped at one output token,
  with `kv_transfer_params` asking the engine to keep the prompt's KV for a remote
  decode (`do_remote_decode: true`);
* the **decode leg** goes to the decode pod: the client's body again, with the
  `kv_transfer_params` the prefill pod answered, which tell the decode engine where to
  read the prompt's blocks (`remote_engine_id`, `remote_block_ids`, `remote_host`, ...).

The shapes are vLLM's own toy proxy's (vllm `tests/v1/kv_connector/nixl_integration/
toy_proxy_server.py`, `send_request_to_service`): the six `kv_transfer_params` fields,
`stream: false`, `max_tokens: 1` (and `max_completion_tokens: 1` where the client set
it), no `stream_options`, and no `min_tokens` / `min_completion_tokens` (the toy proxy
drops them from the prefill leg, which cannot honour them, and keeps them for the
decode leg). llm-d's routing sidecar builds the same legs (llm-d/llm-d-routing-sidecar
`internal/proxy/connector_nixlv2.go`).

On the Envoy path the picker names the prefill pod to the decode pod's sidecar in the
request header `PREFILL_HEADER` (llm-d's `x-prefiller-host-port`, llm-d/
llm-d-routing-sidecar `internal/proxy/proxy.go`; `x-prefiller-url` is its older name):
the picker removes both from every client request and sets the first itself.

A client's own `kv_transfer_params` are hostile: they could name another client's
blocks (`remote_block_ids`, `remote_request_id`) or make the decode pod dial any host
(`remote_host`, `remote_port`). They are dropped from every body before a leg is built
(`strip_client_params`), so only params a prefill pod answered ever reach a decode pod.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "KV_TRANSFER_PARAMS",
    "LEGACY_PREFILL_HEADER",
    "PREFILL_HEADER",
    "PREFILL_PARAMS",
    "decode_body",
    "prefill_body",
    "prefill_params",
    "strip_client_params",
    "without_client_params",
]

KV_TRANSFER_PARAMS = "kv_transfer_params"
PREFILL_HEADER = "x-prefiller-host-port"
LEGACY_PREFILL_HEADER = "x-prefiller-url"  # llm-d's older name: removed, never read
#: What a prefill leg asks of the engine (the toy proxy's and llm-d's literal shape).
PREFILL_PARAMS: dict[str, Any] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}
#: Sampling bounds a one-token prefill cannot honour (dropped from that leg only).
_PREFILL_DROPS = ("stream_options", "min_tokens", "min_completion_tokens")
_MARKER = KV_TRANSFER_PARAMS.encode()


def strip_client_params(body: dict[str, Any]) -> bool:
    """Drop a client's `kv_transfer_params` in place; True when there were some."""
    if KV_TRANSFER_PARAMS not in body:
        return False
    del body[KV_TRANSFER_PARAMS]
    return True


def without_client_params(raw: bytes) -> bytes:
    """`raw` without a client's `kv_transfer_params` (the same bytes when it has none, or
    is not a JSON object: the pod then answers 400 as it would anyway)."""
    if _MARKER not in raw:  # the common case: no parse
        return raw
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
    if not isinstance(body, dict) or KV_TRANSFER_PARAMS not in body:
        return raw
    del body[KV_TRANSFER_PARAMS]
    return orjson.dumps(body)


def prefill_body(body: dict[str, Any]) -> dict[str, Any]:
    """The prefill leg of `body` (a new dict; `body` is left as it was)."""
    leg = {k: v for k, v in body.items() if k not in _PREFILL_DROPS}
    leg[KV_TRANSFER_PARAMS] = dict(PREFILL_PARAMS)
    leg["stream"] = False
    leg["max_tokens"] = 1
    if "max_completion_tokens" in body:
        leg["max_completion_tokens"] = 1
    return leg


def decode_body(body: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The decode leg: the client's `body` unchanged but for the prefill pod's `params`."""
    leg = dict(body)
    leg[KV_TRANSFER_PARAMS] = params
    return leg


def prefill_params(answer: bytes) -> dict[str, Any] | None:
    """The `kv_transfer_params` of a prefill pod's JSON answer; None when there are none
    (a prompt that finished before its token cap, a pod without a KV connector, a
    malformed answer): the request is then served aggregated."""
    try:
        parsed = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return None
    params = parsed.get(KV_TRANSFER_PARAMS) if isinstance(parsed, dict) else None
    if not isinstance(params, dict) or not params:
        return None
    return params
