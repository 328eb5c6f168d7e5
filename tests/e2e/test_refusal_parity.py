"""One bad request, one answer: `igw serve`, the ext_proc picker and `igw global` refuse
the same hostile or malformed request with the same status and the same body bytes.

Real parts on loopback: emulated vLLM pods, `igw serve` (frontends/proxy.py, with API-key
authentication), the picker driven by the fake Envoy the picker tests use (its answer is
an `ImmediateResponse`), and `igw global` in front of that `igw serve` with the same key
file. The words live in one file (core/request/refusals.py); this test is what keeps a
front end from growing its own copy. The picker does not authenticate (Envoy Gateway's
SecurityPolicy does, in front of it), so credential refusals are compared between the
two HTTP servers only.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from aiohttp import web

from inference_gateway.assembly.picker import build_picker
from inference_gateway.assembly.serve import build_gateway
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.frontends.auth import Authenticator, load_api_keys
from inference_gateway.frontends.global_router import build_global_router, parse_router_config
from inference_gateway.frontends.global_router.server import runner_settings

# the picker tests' fake Envoy, imported as they import it (a plain module beside them)
sys.path.insert(0, str(Path(__file__).parents[1] / "gateway" / "frontends" / "extproc"))

from fake_envoy import FakeEnvoy

MODEL = "llama-3.1-8b"
FLEET = {"base_port": 0, "pods": [{"name": "p", "gpu": "H100", "model": MODEL}]}
KEY = "sk-parity-0123456789"
NARROW_KEY = "sk-parity-other-model"  # may use another model only
PATH = "/v1/chat/completions"


def chat(**fields: object) -> bytes:
    return orjson.dumps({"messages": [{"role": "user", "content": "hi"}], **fields})


# (name, body): every one is refused before a pod sees it
BAD_BODIES = [
    ("malformed_json", b"{not json"),
    ("not_an_object", b"[1, 2]"),
    ("missing_model", chat()),
    ("model_not_a_string", chat(model=7)),
    ("model_with_control_characters", chat(model="llama\r\nx-evil: 1")),
    ("model_too_long", chat(model="m" * 5000)),
    ("unknown_model", chat(model="no-such-model")),
    ("max_tokens_huge", chat(model=MODEL, max_tokens=2**40)),
    ("max_tokens_negative", chat(model=MODEL, max_tokens=-5)),
    ("max_tokens_a_string", chat(model=MODEL, max_tokens="100")),
    ("max_completion_tokens_fractional", chat(model=MODEL, max_completion_tokens=1.5)),
    ("n_zero", chat(model=MODEL, n=0)),
    ("n_a_boolean", chat(model=MODEL, n=True)),
    # just over every front end's default body limit (4 MiB)
    ("body_too_large", chat(model=MODEL, padding="x" * (4 * 2**20))),
]

Answer = tuple[int, bytes, dict[str, str]]
# headers a refusal carries that the client acts on (the rest is each server's own)
COMPARED = ("content-type", "retry-after", "www-authenticate", "x-should-retry")


def key_file(tmp_path: Path) -> Path:
    entries = [
        {"client": "team-a", "sha256": hashlib.sha256(KEY.encode()).hexdigest()},
        {
            "client": "narrow",
            "sha256": hashlib.sha256(NARROW_KEY.encode()).hexdigest(),
            "models": ["another-model"],
        },
    ]
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": entries}))
    return path


@pytest.fixture
async def fronts(tmp_path: Path, app_on: Any) -> AsyncIterator[tuple[str, str, str]]:
    """(igw serve URL, igw global URL, picker gRPC target), all over one emulated pod."""
    keys = key_file(tmp_path)
    async with EmulatedFleet(FLEET) as fleet:
        endpoints = [
            Endpoint(e.name, e.host, e.port, pool="p", labels=e.labels, index=i)
            for i, e in enumerate(fleet.endpoints)
        ]
        serve_app, _ = build_gateway(endpoints, auth=Authenticator(load_api_keys(keys)))
        picker = build_picker(endpoints, host="127.0.0.1", grpc_port=0, metrics_port=None)
        await picker.start()
        try:
            async with app_on(serve_app) as serve_url:
                spec = parse_router_config(
                    {
                        "clusters": [{"name": "c1", "region": "r1", "endpoint": serve_url}],
                        "auth": {"apiKeysFile": str(keys)},
                    }
                )
                global_app, _ = build_global_router(spec)
                runner = web.AppRunner(global_app, **runner_settings())
                async with app_on(global_app, runner) as global_url:
                    yield serve_url, global_url, f"127.0.0.1:{picker.port}"
        finally:
            await picker.stop(grace_s=0)


async def over_http(url: str, body: bytes, key: str) -> Answer:
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + PATH, data=body, headers=headers) as response,
    ):
        kept = {k: response.headers[k] for k in COMPARED if k in response.headers}
        return response.status, await response.read(), kept


async def over_ext_proc(target: str, body: bytes) -> Answer:
    async with FakeEnvoy(target) as envoy:
        out = await envoy.exchange(PATH, body)
    assert out.immediate is not None, "the picker routed a request it must refuse"
    headers = {h.header.key: h.header.raw_value.decode() for h in out.immediate.headers.set_headers}
    kept = {k: headers[k] for k in COMPARED if k in headers}
    return out.immediate.status.code, out.immediate.body, kept


async def test_bad_bodies_get_byte_identical_refusals(fronts: tuple[str, str, str]) -> None:
    serve_url, global_url, picker = fronts
    for name, body in BAD_BODIES:
        serve = await over_http(serve_url, body, KEY)
        routed = await over_http(global_url, body, KEY)
        picked = await over_ext_proc(picker, body)
        assert 400 <= serve[0] < 500, (name, serve)
        error = orjson.loads(serve[1])["error"]
        assert set(error) == {"message", "type", "param", "code"}, (name, error)
        assert routed == serve, name
        assert picked == serve, name


@pytest.mark.parametrize(
    ("name", "authorization"),
    [
        ("unknown_key", "Bearer sk-not-a-key"),
        ("no_credential", ""),
        ("not_bearer", f"Basic {KEY}"),
        ("key_not_allowed_the_model", f"Bearer {NARROW_KEY}"),
    ],
)
async def test_credential_refusals_are_byte_identical(
    fronts: tuple[str, str, str], name: str, authorization: str
) -> None:
    """Credential first, then the body, on both HTTP servers: a refused credential with a
    malformed body is the credential's refusal in both."""
    serve_url, global_url, _ = fronts
    for body in (chat(model=MODEL), b"{not json"):
        answers = []
        for url in (serve_url, global_url):
            headers = {"content-type": "application/json"}
            if authorization:
                headers["authorization"] = authorization
            async with (
                aiohttp.ClientSession() as session,
                session.post(url + PATH, data=body, headers=headers) as response,
            ):
                kept = {k: response.headers[k] for k in COMPARED if k in response.headers}
                answers.append((response.status, await response.read(), kept))
        serve, routed = answers
        if name == "key_not_allowed_the_model" and body.startswith(b"{not"):
            assert serve[0] == 400, serve  # no model to refuse: the body's own refusal
        else:
            assert serve[0] in (401, 404), (name, serve)
        assert routed == serve, (name, body)
