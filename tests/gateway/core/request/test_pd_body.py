"""The P/D body rules against the shapes upstream builds.

Upstream: vllm `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`
(`send_request_to_service`: the six `kv_transfer_params` fields, `stream: false`,
`max_tokens: 1`, `max_completion_tokens: 1` only where the client set it, no
`stream_options`, no `min_tokens` / `min_completion_tokens` on the prefill leg, the
prefill answer's `kv_transfer_params` into the decode leg) and llm-d's sidecar
(llm-d/llm-d-routing-sidecar `internal/proxy/connector_nixlv2.go`, the same fields).
The expected dicts are written out here, not derived from the module's constants, so a
change of the rule fails the test.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from inference_gateway.core.request.pd_body import (
    decode_body,
    for_next_pod,
    prefill_body,
    prefill_params,
    strip_client_params,
    without_client_params,
)
from inference_gateway.errors import UpstreamConnectError, UpstreamError

TOY_PROXY_PARAMS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}
ANSWERED = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_block_ids": [0, 1, 2],
    "remote_engine_id": "e1",
    "remote_request_id": "r1",
    "remote_host": "10.0.0.7",
    "remote_port": 8000,
    "tp_size": 1,
}


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hello"}], **extra}


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        (
            chat(stream=True, stream_options={"include_usage": True}, max_tokens=64),
            chat(stream=False, max_tokens=1, kv_transfer_params=TOY_PROXY_PARAMS),
        ),
        (  # max_completion_tokens capped only where the client set it
            chat(max_completion_tokens=50, temperature=0.2),
            chat(
                max_completion_tokens=1,
                max_tokens=1,
                temperature=0.2,
                stream=False,
                kv_transfer_params=TOY_PROXY_PARAMS,
            ),
        ),
        (  # min_tokens cannot hold on a one-token leg: dropped there
            {"model": "m", "prompt": "p", "min_tokens": 5, "min_completion_tokens": 3},
            {
                "model": "m",
                "prompt": "p",
                "max_tokens": 1,
                "stream": False,
                "kv_transfer_params": TOY_PROXY_PARAMS,
            },
        ),
    ],
)
def test_the_prefill_leg_is_the_toy_proxys(
    client: dict[str, Any], expected: dict[str, Any]
) -> None:
    before = orjson.dumps(client)
    assert prefill_body(client) == expected
    assert orjson.dumps(client) == before  # the client's body is left for the decode leg


def test_the_decode_leg_is_the_clients_body_with_the_answered_params() -> None:
    client = chat(stream=True, max_tokens=64, min_tokens=5, stream_options={"include_usage": True})
    assert decode_body(client, ANSWERED) == {**client, "kv_transfer_params": ANSWERED}
    assert "kv_transfer_params" not in client


def test_a_clients_own_params_are_stripped() -> None:
    hostile = chat(kv_transfer_params={**ANSWERED, "remote_host": "169.254.169.254"})
    assert strip_client_params(hostile) is True
    assert hostile == chat()
    assert strip_client_params(hostile) is False
    null = chat(kv_transfer_params=None)  # present but null: gone too
    assert strip_client_params(null) is True and null == chat()


@pytest.mark.parametrize(
    "raw",
    [
        orjson.dumps(chat(kv_transfer_params=ANSWERED)),
        orjson.dumps(chat(kv_transfer_params="x")),
    ],
)
def test_raw_bodies_lose_the_params(raw: bytes) -> None:
    assert orjson.loads(without_client_params(raw)) == chat()


@pytest.mark.parametrize(
    "raw",
    [
        orjson.dumps(chat()),  # none: the very same bytes
        b'{"model": "m", "messages": "kv_transfer_params"}',  # the word, not the field
        b"not json kv_transfer_params",
        b'["kv_transfer_params"]',
    ],
)
def test_bodies_without_the_field_pass_unchanged(raw: bytes) -> None:
    assert without_client_params(raw) is raw


@pytest.mark.parametrize(
    ("answer", "params"),
    [
        (orjson.dumps({"id": "x", "kv_transfer_params": ANSWERED}), ANSWERED),
        (orjson.dumps({"id": "x", "kv_transfer_params": None}), None),  # finished early
        (orjson.dumps({"id": "x"}), None),  # a pod without a KV connector
        (orjson.dumps({"kv_transfer_params": {}}), None),
        (orjson.dumps({"kv_transfer_params": [1]}), None),
        (b"<html>", None),
        (b"[]", None),
    ],
)
def test_the_prefill_answers_params(answer: bytes, params: dict[str, Any] | None) -> None:
    assert prefill_params(answer) == params


def test_a_decode_leg_goes_to_the_next_pod_whole_once_its_pod_may_have_read_the_blocks() -> None:
    """Refused (the pod never got it): the params stay, the next pod reads the blocks.
    Closed after the request was written, or any other failure: the pod may have read
    them (the prefill pod frees blocks once read), so the next pod prefills itself."""
    params = {"do_remote_prefill": True, "remote_block_ids": [1, 2], "remote_port": 8000}
    leg = orjson.dumps({"model": "m", "messages": [], "kv_transfer_params": params})
    refused = UpstreamConnectError("connect to 10.0.0.1:8000 failed")
    assert for_next_pod(leg, refused) is leg
    for taken in (
        UpstreamConnectError("closed before answering", sent=True),
        UpstreamError("cut off mid-body"),
    ):
        assert orjson.loads(for_next_pod(leg, taken)) == {"model": "m", "messages": []}
    aggregated = orjson.dumps({"model": "m", "messages": []})
    assert for_next_pod(aggregated, UpstreamError("x")) is aggregated
