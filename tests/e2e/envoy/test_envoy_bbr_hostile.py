"""Hostile bodies through real Envoy 1.40 and `igw bbr` (issue 31, findings 2 and 3).

The body-based router is the first ext_proc in Envoy's chain (Envoy Gateway v1.5's
EnvoyExtensionPolicy, FULL_DUPLEX_STREAMED): it sees every body before any picker does
and fails closed, so what a client sends must neither grow it nor make Envoy answer 500.

* 20 concurrent 16 MiB uploads: each is answered 413 at the picker's own limit (or 503
  once the router's body budget is spent), OpenAI-shaped, and the router's RSS stays
  within 64 MiB of idle (before: it kept every byte, 448 MB for one 400 MiB body);
* a 3 MB `model`, or one with CR/LF, is an OpenAI-shaped 400 (before: Envoy's own 500,
  "header size exceeds 60 kilobytes" / "invalid character"), the value never echoed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

import aiohttp
import orjson
from envoy_harness import EnvoyStack

CHAT = "/v1/chat/completions"
MIB = 2**20
RSS_BOUND = 64 * MIB  # issue 31's must-hold for bbr under 20 oversized bodies


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


async def upload(port: int, size: int, piece: int = 256 * 1024) -> tuple[int, dict[str, object]]:
    """POST a chat body of `size` bytes, chunked, reading the answer while still sending
    (Envoy answers a refused upload before it has all of it). Returns status and JSON."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = b'{"model":"llama-3.1-8b","messages":[{"role":"user","content":"'
    tail = b'"}]}'

    async def send() -> None:
        writer.write(
            f"POST {CHAT} HTTP/1.1\r\nhost: igw\r\ncontent-type: application/json\r\n"
            "transfer-encoding: chunked\r\n\r\n".encode()
        )
        sent = 0
        filler = b"x" * piece
        while sent < size:
            data = head + filler[len(head) :] if sent == 0 else filler
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
            sent += len(data)
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
        await writer.drain()

    sender = asyncio.create_task(send())
    try:
        status = int((await reader.readline()).split()[1])
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        else:  # chunked (Envoy's local replies to HTTP/1.1)
            body = b""
            while size := int((await reader.readline()).strip(), 16):
                body += await reader.readexactly(size + 2)
                body = body[:-2]
    finally:
        sender.cancel()
        with contextlib.suppress(BaseException):
            await sender
        writer.close()
    return status, orjson.loads(body)


async def test_twenty_oversized_uploads_get_413_and_bbr_stays_within_64_mib(
    envoy_stack: Callable[..., EnvoyStack],
) -> None:
    async with envoy_stack() as stack, aiohttp.ClientSession() as http:
        assert stack.bbr is not None and stack.bbr.process is not None
        pid = stack.bbr.process.pid
        async with http.post(
            stack.url + CHAT,
            json={"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "hi"}]},
        ) as response:
            assert response.status == 200  # warm: the router has served a request
        idle = _status_kib(pid, "VmRSS")
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # restart the peak (VmHWM) here
        port = int(stack.url.rsplit(":", 1)[1])
        async with asyncio.timeout(120):
            answers = await asyncio.gather(*(upload(port, 16 * MIB) for _ in range(20)))
        peak = _status_kib(pid, "VmHWM")
        statuses = sorted(status for status, _ in answers)
        assert set(statuses) <= {413, 503} and 413 in statuses, statuses
        for status, body in answers:
            error = body["error"]
            assert isinstance(error, dict)
            if status == 413:  # the picker's own words for the same limit
                assert error["code"] == "request_too_large"
                assert error["message"] == f"Request body exceeds {4 * MIB} bytes."
            else:
                assert error["code"] == "server_busy"
        assert peak - idle < RSS_BOUND, f"bbr grew {(peak - idle) / MIB:.0f} MiB past idle"
        async with http.post(
            stack.url + CHAT,
            json={"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "hi"}]},
        ) as response:
            assert response.status == 200  # and it still serves


#: (model, the 400's words); None: not the router's to refuse (the picker's 404)
MODELS: list[tuple[str, str | None]] = [
    ("m" * 3_000_000, "at most 4096 bytes long"),
    ("llama-3.1-8b\r\nx-injected: 1", "free of control characters"),
    ("llama\n", "free of control characters"),
    ("modèle-ü", None),  # UTF-8 is text, not a control character
]


async def test_a_model_no_header_can_carry_is_an_openai_400_not_envoys_500(
    envoy_stack: Callable[..., EnvoyStack],
) -> None:
    async with envoy_stack() as stack:
        client = stack.client()
        for model, problem in MODELS:
            error = None
            try:
                await client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=2
                )
            except Exception as caught:  # the SDK's BadRequestError, or what Envoy gave
                error = caught
            status = getattr(error, "status_code", None)
            body = getattr(error, "body", None)
            assert isinstance(body, dict), repr(error)[:300]
            if problem is None:
                assert (status, body["code"]) == (404, "model_not_found"), body
                continue
            assert status == 400, repr(error)[:300]
            assert body["code"] == "invalid_value" and body["param"] == "model"
            assert body["message"] == f"`model` must be {problem}."
        await client.close()
