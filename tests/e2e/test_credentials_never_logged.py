"""No credential in any log or answer: `igw serve` and `igw auth` as real processes,
logging at DEBUG (a wrapper configures the root logger before `igw` does, so every
line either could write is captured, not only what INFO shows), driven through every
refusal path there is: no credential, another scheme, an unknown key, a forged, expired,
wrong-audience and wrong-issuer JWT, a JWT missing a required claim or with a numeric
string `exp`, a credential not allowed the model, tokens of 10 KiB (read, refused 401),
20 KiB and 70 KiB (past the header limit: 431), the same in another header, and good
credentials too. Then every byte both processes wrote (stdout and stderr) and every
answer body is searched for each credential's distinctive part.

Before: aiohttp quoted the first ~100 bytes of an oversized `Authorization` header in
its plain-text 400 and in the log (`igw auth`: an ERROR traceback; `igw serve`: the
INFO "malformed request" line), and `igw auth` wrote an access-log line per refusal.
The refusals are also counted: the processes' `igw_auth_refusals_total` add up to what
was refused, while the log holds at most a couple of summary lines.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import yaml
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from inference_gateway.emulator.fleet import EmulatedFleet

MODEL = "llama-3.1-8b"
ISSUER = "https://issuer.example"
FLEET = {"base_port": 0, "pods": [{"name": "h", "gpu": "H100", "model": MODEL}]}
#: Root logger at DEBUG before `igw` configures its own (basicConfig is then a no-op).
WRAPPER = (
    "import logging, sys; logging.basicConfig(level=logging.DEBUG, "
    "format='%(levelname)s %(name)s %(message)s'); "
    "from inference_gateway.cli.main import main; sys.exit(main())"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def secret(tag: str, size: int = 0) -> str:
    """A credential whose every 12-character piece is unique to it (found by the grep)."""
    body = f"sk-{tag}-{secrets.token_hex(16)}"
    while len(body) < size:
        body += secrets.token_hex(32)
    return body[:size] if size else body


class Credentials:
    """Keys, a signing key and its JWKS, and every credential the test sends."""

    def __init__(self, tmp_path: Path) -> None:
        self.good_key = secret("good")
        self.limited_key = secret("limited")  # allowed another model only
        self.signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.signing.public_key()))
        self.jwks = {"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]}
        self.jwks_path = tmp_path / "jwks.json"
        self.jwks_path.write_text(json.dumps(self.jwks))
        self.keys_path = tmp_path / "keys.yaml"
        entries = [
            {"client": "good", "sha256": hashlib.sha256(self.good_key.encode()).hexdigest()},
            {
                "client": "limited",
                "sha256": hashlib.sha256(self.limited_key.encode()).hexdigest(),
                "models": ["other-model"],
            },
        ]
        self.keys_path.write_text(yaml.safe_dump({"keys": entries}))
        self.sent: list[str] = []  # every credential that went out, good or bad

    def token(self, key: Any = None, **claims: Any) -> str:
        body = {
            "iss": ISSUER,
            "aud": "igw",
            "sub": "svc",
            "exp": time.time() + 300,
            "scope": "inference",
            "nonce": secrets.token_hex(16),  # every token unique, so greppable
            **claims,
        }
        return jwt.encode(body, key or self.signing, algorithm="RS256", headers={"kid": "k1"})

    def cases(self) -> list[tuple[dict[str, str], set[int]]]:
        """(headers, acceptable statuses) of every request the test sends."""
        good_jwt = self.token()
        forged = jwt.encode(
            {"iss": ISSUER, "aud": "igw", "sub": "x", "exp": time.time() + 60,
             "nonce": secrets.token_hex(16)},
            "a-shared-secret-anyone-could-guess-32b", algorithm="HS256", headers={"kid": "k1"},
        )  # fmt: skip
        bearer = {
            "unknown key": secret("unknown"),
            "forged HS256": forged,
            "other signer": self.token(self.other),
            "expired": self.token(exp=time.time() - 3600),
            "wrong audience": self.token(aud="someone-else"),
            "wrong issuer": self.token(iss="https://evil.example"),
            "missing claim": self.token(scope="read"),
            "string exp": self.token(exp=str(int(time.time()) + 3600)),
            "10 KiB": secret("ten", 10 * 1024),
            "20 KiB": secret("twenty", 20 * 1024),
            "70 KiB": secret("seventy", 70 * 1024),
        }
        cases: list[tuple[dict[str, str], set[int]]] = [
            ({"authorization": f"Bearer {value}"}, {401, 431}) for value in bearer.values()
        ]
        self.sent += list(bearer.values())
        basic = secret("basic")
        other_header = secret("apikey", 20 * 1024)
        self.sent += [basic, other_header, self.good_key, self.limited_key, good_jwt]
        cases += [
            ({}, {401}),
            ({"authorization": f"Basic {basic}"}, {401}),
            ({"x-api-key": other_header, "authorization": "Bearer x"}, {431}),
            ({"authorization": f"Bearer {self.limited_key}"}, {404}),
            ({"authorization": f"Bearer {self.good_key}"}, {200}),
            ({"authorization": f"Bearer {good_jwt}"}, {200}),
        ]
        return cases


@asynccontextmanager
async def igw(args: list[str], ready: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, int]]:
    """`igw ARGS --port P` under the DEBUG wrapper, once `ready` answers 200."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRAPPER, *args, "--port", str(port),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        async with aiohttp.ClientSession() as session:
            while True:
                assert process.returncode is None, f"igw {args[0]} exited"
                try:
                    async with session.get(f"http://127.0.0.1:{port}{ready}") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                assert time.monotonic() < deadline, f"igw {args[0]} did not come up"
                await asyncio.sleep(0.1)
        yield process, port
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()


async def raw_request(port: int, path: str, headers: dict[str, str], body: bytes) -> bytes:
    """One HTTP/1.1 request on a fresh connection; the whole answer (status line on)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"POST {path} HTTP/1.1\r\nhost: igw\r\ncontent-type: application/json\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    writer.write(head.encode() + body)
    await writer.drain()
    async with asyncio.timeout(10):
        answer = await reader.read()
    writer.close()
    return answer


async def refusals(port: int) -> dict[str, float]:
    """`igw_auth_refusals_total` by reason, from the process's /metrics."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as r,
    ):
        text = await r.text()
    out = {}
    for line in text.splitlines():
        if line.startswith("igw_auth_refusals_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            out[reason] = float(line.rsplit(" ", 1)[1])
    return out


def pieces(credential: str) -> list[str]:
    """Distinctive pieces of a credential: its head (what a truncating log would show)
    and, for a JWT, its payload and signature (the header part is shared by all)."""
    parts = credential.split(".")
    if len(parts) == 3:
        return [parts[1][-24:], parts[2][:24]]
    return [credential[3:27], credential[-24:]]


async def test_no_credential_reaches_a_log_or_an_answer(tmp_path: Path) -> None:
    creds = Credentials(tmp_path)
    issuer = web.Application()

    async def jwks(_: web.Request) -> web.Response:
        return web.json_response(creds.jwks)

    issuer.router.add_get("/jwks.json", jwks)
    issuer_runner = web.AppRunner(issuer)
    await issuer_runner.setup()
    issuer_site = web.TCPSite(issuer_runner, "127.0.0.1", 0)
    await issuer_site.start()
    issuer_port = issuer_site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    jwt_flags = ["--jwt-issuer", ISSUER, "--jwt-audience", "igw", "--jwt-claim", "scope=inference"]
    output: list[bytes] = []
    answers: list[bytes] = []
    refused: dict[str, dict[str, float]] = {}
    try:
        async with EmulatedFleet(FLEET) as fleet:
            endpoints = tmp_path / "endpoints.yaml"
            pod = fleet.endpoints[0]
            endpoints.write_text(yaml.safe_dump({"endpoints": [
                {"name": "h", "address": "127.0.0.1", "port": pod.port,
                 "labels": {"igw.dev/pool": "h"}}]}))  # fmt: skip
            serve_args = ["serve", "--endpoints", str(endpoints),
                          "--api-keys", str(creds.keys_path), *jwt_flags,
                          "--jwt-jwks", str(creds.jwks_path)]  # fmt: skip
            auth_args = ["auth", "--api-keys", str(creds.keys_path), *jwt_flags,
                         "--jwt-jwks", f"http://127.0.0.1:{issuer_port}/jwks.json",
                         "--jwks-allow-loopback-http"]  # fmt: skip
            async with (
                igw(serve_args, "/health") as (serve, serve_port),
                igw(auth_args, "/healthz") as (auth, auth_port),
            ):
                body = json.dumps(
                    {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                     "max_tokens": 2}).encode()  # fmt: skip
                deadline = time.monotonic() + 30  # igw auth fetches its JWKS at start
                while b" 200 " not in (
                    await raw_request(auth_port, "/authz/v1/chat/completions",
                                      {"authorization": f"Bearer {creds.token()}"}, body)
                ).split(b"\r\n", 1)[0]:  # fmt: skip
                    assert time.monotonic() < deadline, "igw auth never loaded its JWKS"
                    await asyncio.sleep(0.1)
                cases = creds.cases()
                for port, path in (
                    (serve_port, "/v1/chat/completions"),
                    (auth_port, "/authz/v1/chat/completions"),
                ):
                    for headers, statuses in cases:
                        answer = await raw_request(port, path, headers, body)
                        status = int(answer.split(b" ", 2)[1])
                        assert status in statuses, (path, list(headers), answer[:300])
                        if status != 200:
                            assert b'{"error":' in answer, answer[:300]  # OpenAI's shape
                        answers.append(answer)
                refused["serve"] = await refusals(serve_port)
                refused["auth"] = await refusals(auth_port)
                for process in (serve, auth):
                    process.terminate()
                    out, err = await process.communicate()
                    output += [out, err]
    finally:
        await issuer_runner.cleanup()
    log = b"".join(output).decode(errors="replace")
    every_answer = b"".join(answers).decode(errors="replace")
    assert "igw serve: listening" in log and "igw auth: ext_authz" in log  # captured at all
    for credential in creds.sent:
        for piece in pieces(credential):
            assert piece not in log, f"a credential reached the log: …{piece}…"
            assert piece not in every_answer, f"a credential was echoed: …{piece}…"
    # every 401 is counted (the 431s never reach the check): the unknown key, seven bad
    # JWTs, the 10 KiB token, no credential and Basic; `igw auth` also refused JWTs while
    # it was fetching its JWKS (`jwks_not_loaded`, the readiness loop above)
    for name, counts in refused.items():
        counts.pop("jwks_not_loaded", None)
        assert sum(counts.values()) == 11, (name, counts)
        assert counts["missing"] == 1 and counts["not_bearer"] == 1, (name, counts)
        assert counts["unknown_key"] == 2 and counts["jwt_expired"] == 1, (name, counts)
    summary = [line for line in log.splitlines() if "refused credentials" in line]
    assert 1 <= len(summary) <= 4, summary  # summed, never one line per refusal
    assert "aiohttp.access" not in log  # no access-log line per request
    assert "Traceback" not in log, log[-3000:]
