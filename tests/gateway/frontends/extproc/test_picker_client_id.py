"""The picker keys rate limits on `x-igw-client-id` only when an authenticating filter
set it (`igw picker --client-id-from-auth`, which the charts pass with
`kubernetes.auth`: Envoy Gateway's SecurityPolicy extAuth then sets the header on every
request, overriding a client's; tests/e2e/test_auth_through_envoy.py shows the override
with real Envoy). Without the flag (no SecurityPolicy) any client could name itself
`team-a` and spend team-a's quota: the header is ignored.

Through the ext_proc protocol on loopback (the fake Envoy beside this file speaks it),
with emulated pods behind the picker.
"""

from __future__ import annotations

import orjson
from fake_envoy import FakeEnvoy, PickerFactory

from inference_gateway.cli.main import build_parser

CHAT = "/v1/chat/completions"
TEAM_A = {"x-igw-client-id": "team-a"}
CONFIG = {"rateLimits": [{"client": "team-a", "requestsPerMinute": 3}]}
BODY = orjson.dumps(
    {"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
)


async def statuses(picker_port: int, count: int) -> list[int]:
    async with FakeEnvoy(f"127.0.0.1:{picker_port}") as envoy:
        outs = [await envoy.exchange(CHAT, BODY, headers=TEAM_A) for _ in range(count)]
    return [o.immediate.status.code if o.immediate is not None else o.status for o in outs]


async def test_a_clients_own_client_id_spends_nobodys_quota(make_picker: PickerFactory) -> None:
    picker = await make_picker(CONFIG)
    assert not picker.core.director.trusted_client_id  # the default: nothing vouches for it
    assert await statuses(picker.port, 5) == [200] * 5  # team-a's 3/min is not theirs


async def test_behind_an_authenticating_filter_the_client_id_keys_the_limits(
    make_picker: PickerFactory,
) -> None:
    picker = await make_picker(CONFIG)
    flags = ["picker", "--endpoints", "e.yaml", "--client-id-from-auth"]
    picker.core.director.trusted_client_id = (
        build_parser("picker").parse_args(flags).client_id_from_auth
    )  # what `igw picker` does with the flag
    assert await statuses(picker.port, 4) == [200, 200, 200, 429]
