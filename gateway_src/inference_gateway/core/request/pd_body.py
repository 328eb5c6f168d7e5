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
A prefill pod's params are read once: a decode leg that goes on to another pod after
its pod may have read them (`for_next_pod`), and a broken stream's continuation
(resume.py), go without them.

A prefill pod's params are checked too (`checked_params`): a compromised or broken pod
could otherwise steer the decode pod, which dials `remote_host:remote_port` for the
blocks, anywhere the decode pod can reach (a second-order SSRF past the sidecar's
allowlist), or hand it values it refuses, turning the promised aggregated answer into a
400. vLLM's NixlConnector answers (`request_finished`, vllm `distributed/kv_transfer/
kv_connector/v1/nixl_connector.py`) `do_remote_prefill: true`, `do_remote_decode:
false`, `remote_engine_id`, `remote_request_id`, `remote_block_ids` (a list of block
ids, or one list per KV-cache group with the hybrid allocator), `remote_host` (the
pod's `VLLM_NIXL_SIDE_CHANNEL_HOST`, its pod IP in our charts) and `remote_port` (its
`VLLM_NIXL_SIDE_CHANNEL_PORT`, 5600 by default, plus the data-parallel rank), `tp_size`,
and in newer versions more counts (`dcp_size`, `pp_size`, `remote_num_tokens`, ...).
The rule: `remote_host` must be the address the leg was sent to, `remote_port` that
pod's serving port (the emulator serves its reads there) or one of the NIXL side-channel
ports the owner allows, the ids integers in range and at most `MAX_REMOTE_BLOCK_IDS`
(a two-million-token prompt at vLLM's block size 16), the strings short. Keys this
module does not know pass as the engine wrote them if they are scalars (an engine's
version has its own); anything else fails the check, and the request is served
aggregated.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from typing import Any

import orjson

from inference_gateway.errors import InferenceGatewayError, UpstreamConnectError, UpstreamError

__all__ = [
    "KV_TRANSFER_PARAMS",
    "LEGACY_PREFILL_HEADER",
    "MAX_REMOTE_BLOCK_IDS",
    "NIXL_SIDE_CHANNEL_PORT",
    "PREFILL_HEADER",
    "PREFILL_PARAMS",
    "BadParams",
    "checked_params",
    "decode_body",
    "for_next_pod",
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
#: vLLM's `VLLM_NIXL_SIDE_CHANNEL_PORT` default: where a prefill pod's NIXL handshake
#: listens (`remote_port`), for data-parallel rank 0.
NIXL_SIDE_CHANNEL_PORT = 5600
#: A two-million-token prompt in blocks of 16; the emulator refuses past 65,536.
MAX_REMOTE_BLOCK_IDS = 1 << 17
_MAX_BLOCK_ID = 2**31 - 1
_MAX_TEXT = 256  # an engine or request id, or an unknown string value
_MAX_KEYS = 32
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


def for_next_pod(raw: bytes, error: UpstreamError) -> bytes:
    """The decode leg's body for the next pod after its attempt failed with `error`
    before any answer byte: as it was when the pod never got the request (a refused
    connection, a failed write), whole (`without_client_params`: no `kv_transfer_params`)
    when the connection closed after the request was written. That pod may have read
    the prompt's blocks, which the prefill pod frees once read, and vLLM's NixlConnector
    only logs a second read of freed blocks (`_get_new_notifs`), whatever they hold by
    then: the next pod prefills the prompt itself (docs/migration.md, "With a P/D
    split")."""
    if isinstance(error, UpstreamConnectError) and not error.sent:
        return raw
    return without_client_params(raw)


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


class BadParams(InferenceGatewayError):
    """A prefill pod's `kv_transfer_params` that must not reach a decode pod."""


def checked_params(
    params: dict[str, Any], host: str, port: int, side_channel_ports: Collection[int] = ()
) -> dict[str, Any]:
    """`params` when a decode pod may be sent them: answered by the prefill pod at
    `host:port`, whose NIXL side channel is on `port` or one of `side_channel_ports`
    (module docstring); `BadParams` says why not."""
    if len(params) > _MAX_KEYS:
        raise BadParams("too many keys")
    if params.get("do_remote_prefill") is not True or params.get("do_remote_decode") not in (
        False,
        None,
    ):
        raise BadParams("not a decode leg's params")
    for name in ("remote_engine_id", "remote_request_id"):
        value = params.get(name)
        if name == "remote_request_id" and value is None:
            continue  # older NixlConnector versions do not send it
        if not _short_text(value):
            raise BadParams(f"{name} is not a short string")
    _check_address(params.get("remote_host"), params.get("remote_port"), host, port,
                   side_channel_ports)  # fmt: skip
    _check_blocks(params.get("remote_block_ids"))
    for name, value in params.items():
        if name in _CHECKED or value is None or isinstance(value, bool | float):
            continue
        if isinstance(value, int):
            if not -(2**63) <= value < 2**63:
                raise BadParams(f"{name[:40]} is out of range")
        elif not _short_text(value):
            raise BadParams(f"{name[:40]} is not a scalar")
    return params


_CHECKED = frozenset(
    {
        "do_remote_prefill",
        "do_remote_decode",
        "remote_engine_id",
        "remote_request_id",
        "remote_host",
        "remote_port",
        "remote_block_ids",
    }
)


def _short_text(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_TEXT and value.isprintable()


def _check_address(
    remote_host: Any, remote_port: Any, host: str, port: int, side_channel_ports: Collection[int]
) -> None:
    if not isinstance(remote_host, str) or len(remote_host) > 64:
        raise BadParams("remote_host is not an address")
    try:
        same = ipaddress.ip_address(remote_host) == ipaddress.ip_address(host)
    except ValueError:
        raise BadParams("remote_host is not an IP address") from None
    if not same:
        raise BadParams("remote_host is not the prefill pod the leg went to")
    if isinstance(remote_port, bool) or not isinstance(remote_port, int):
        raise BadParams("remote_port is not an integer")
    if remote_port != port and remote_port not in side_channel_ports:
        raise BadParams("remote_port is neither the pod's port nor a NIXL side-channel port")


def _check_blocks(blocks: Any) -> None:
    if not isinstance(blocks, list):
        raise BadParams("remote_block_ids is not a list")
    groups = blocks if blocks and all(isinstance(g, list) for g in blocks) else [blocks]
    total = 0
    for group in groups:
        total += len(group)
        if total > MAX_REMOTE_BLOCK_IDS:
            raise BadParams(f"more than {MAX_REMOTE_BLOCK_IDS} remote_block_ids")
        for block in group:
            if isinstance(block, bool) or not isinstance(block, int):
                raise BadParams("remote_block_ids holds a value that is not a block id")
            if not 0 <= block <= _MAX_BLOCK_ID:
                raise BadParams("remote_block_ids holds an id out of range")
