"""`igw picker` on a P/D pool: llm-d's convention on the ext_proc wire.

The destination is the decode pod; the prefill pod travels in the request header
`x-prefiller-host-port` (llm-d/llm-d-routing-sidecar `internal/proxy/proxy.go`), for
the sidecar on the decode pod. Whatever a client sent under that name (or llm-d's older
`x-prefiller-url`) is replaced or removed, and a client's `kv_transfer_params` are not
in the body Envoy forwards. Roles and config: llm-d's (`llm-d.ai/role`,
`pd-profile-handler`, `prefix-based-pd-decider`). The pods are emulated; Envoy is the
test's fake (fake_envoy.py), whose messages are read as Envoy would apply them.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from fake_envoy import FakeEnvoy, PickerFactory

from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.emulator.fleet import EmulatedFleet

ROLE = "llm-d.ai/role"
CHAT = "/v1/chat/completions"
HOSTILE = {"do_remote_prefill": True, "remote_host": "169.254.169.254", "remote_port": 80}


def config() -> dict[str, Any]:
    def profile(name: str, role_filter: str) -> dict[str, Any]:
        return {
            "name": name,
            "plugins": [{"pluginRef": role_filter}, {"pluginRef": "queue-scorer", "weight": 1}],
        }

    return {
        "pools": [{"name": "p", "selector": {"igw.dev/pool": "p"}}],
        "models": [{"name": "llama-3.1-8b", "pool": "p", "profile": "decode"}],
        "plugins": [
            {"type": "prefill-filter"},
            {"type": "decode-filter"},
            {"type": "prefix-based-pd-decider", "parameters": {"nonCachedTokens": 512}},
            {"type": "pd-profile-handler"},
        ],
        "schedulingProfiles": [
            profile("decode", "decode-filter"),
            profile("prefill", "prefill-filter"),
        ],
    }


def roles(fleet: EmulatedFleet) -> tuple[list[Endpoint], str, set[str]]:
    """The fleet's first pod is the prefill pod, the others decode; (endpoints, the
    prefill pod's ip:port, the decode pods' ip:ports)."""
    out = []
    for i, e in enumerate(fleet.endpoints):
        role = "prefill" if i == 0 else "decode"
        labels = {**e.labels, "igw.dev/pool": "p", ROLE: role}
        out.append(Endpoint(e.name, e.host, e.port, pool="p", labels=labels, index=i))
    hostports = [f"{e.host}:{e.port}" for e in fleet.endpoints]
    return out, hostports[0], set(hostports[1:])


def headers_answer(messages: list[pb.ProcessingResponse]) -> pb.HeaderMutation:
    answer = next(m for m in messages if m.HasField("request_headers"))
    return answer.request_headers.response.header_mutation


def body(prompt: str) -> bytes:
    return orjson.dumps(
        {
            "model": "llama-3.1-8b",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 4,
            "kv_transfer_params": HOSTILE,
        }
    )


@pytest.mark.parametrize(
    ("prompt", "split"), [("tok " * 3000, True), ("hello", False)], ids=["long", "short"]
)
async def test_the_prefill_pod_travels_in_the_header_and_a_clients_never_does(
    make_picker: PickerFactory, fleet: EmulatedFleet, prompt: str, split: bool
) -> None:
    endpoints, prefill, decode = roles(fleet)
    picker = await make_picker(config(), endpoints=endpoints)
    client_headers = {"x-prefiller-host-port": "127.0.0.2:1", "x-prefiller-url": "http://x"}
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        stream = envoy.open()
        out = await envoy.send_request(stream, CHAT, body(prompt), headers=client_headers)
        await stream.close()
    assert out.destination in decode  # the decode pod, with or without a split
    mutation = headers_answer(out.messages)
    sets = {o.header.key: o.header.raw_value.decode() for o in mutation.set_headers}
    if split:  # the picker's own value replaces the client's; the old name goes
        assert sets["x-prefiller-host-port"] == prefill
        assert list(mutation.remove_headers) == ["x-prefiller-url"]
    else:  # aggregated: both names removed
        assert "x-prefiller-host-port" not in sets
        assert sorted(mutation.remove_headers) == ["x-prefiller-host-port", "x-prefiller-url"]
    forwarded = orjson.loads(out.upstream_body)
    assert "kv_transfer_params" not in forwarded and forwarded["messages"][0]["content"] == prompt
    assert sets["content-length"] == str(len(out.upstream_body))
