"""Resume on break (core/request/resume.py): which requests may be resumed, the body that
continues one as vLLM's OpenAI server continues an answer (vllm/entrypoints/openai/
protocol.py `ChatCompletionRequest.continue_final_message` / `add_generation_prompt`),
the splice of the continuation's events into the client's stream, and the resumer over
real async chunk sources (the pods' streams are loopback pods in tests/e2e)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from inference_gateway.core.request.resume import (
    Delivered,
    Resumer,
    Splicer,
    continuation,
    unresumable,
)

CHAT = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "max_tokens": 10,
    "temperature": 0,
}


def event(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def chunk(text: str | None = None, *, role: bool = False, finish: str | None = None,
          id_: str = "chatcmpl-a", model: str = "m") -> bytes:  # fmt: skip
    delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": text}
    return event(
        {
            "id": id_,
            "object": "chat.completion.chunk",
            "created": 7,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def usage(prompt: int, completion: int, id_: str = "chatcmpl-b") -> bytes:
    return event(
        {
            "id": id_,
            "model": "m",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
    )


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"n": 2}, "n > 1"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"seed": 1, "temperature": 0.7}, "seed at an offset"),
        ({"seed": 1, "temperature": None}, "seed at an offset"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"guided_json": {}}, "structured output"),
        ({"stream": False}, "not streamed"),
    ],
)
def test_what_cannot_be_resumed_faithfully(change: dict[str, Any], why: str) -> None:
    body = {k: v for k, v in {**CHAT, **change}.items() if v is not None}
    assert unresumable(body, chat=True) == why


def test_plain_requests_and_a_seed_at_temperature_0_can_be_resumed() -> None:
    assert unresumable(CHAT, chat=True) is None
    assert unresumable({**CHAT, "seed": 3}, chat=True) is None
    completions = {"model": "m", "prompt": "once", "stream": True}
    assert unresumable(completions, chat=False) is None
    assert unresumable({**completions, "prompt": [1, 2]}, chat=False) == "prompt not text"
    assert unresumable({**completions, "echo": True}, chat=False) == "echo"


def test_delivered_reads_what_the_client_got() -> None:
    data = chunk(role=True) + chunk(" the") + chunk(" sea")
    got = Delivered.read(data, chat=True)
    assert (got.id, got.model, got.created, got.role_sent) == ("chatcmpl-a", "m", 7, True)
    assert (got.text, got.tokens, got.blocker) == (" the sea", 2, None)
    assert Delivered.read(data + b'data: {"id"', chat=True).blocker == "broke inside an event"
    assert Delivered.read(data + chunk("", finish="stop"), chat=True).blocker == "finished"
    call = event({"choices": [{"delta": {"tool_calls": [{"index": 0}]}, "finish_reason": None}]})
    assert Delivered.read(data + call, chat=True).blocker == "tool call sent"


def test_chat_continuation_is_vllms_continue_final_message() -> None:
    delivered = Delivered(tokens=2, parts=[" the sea"])
    body = {**CHAT, "max_completion_tokens": 8, "min_tokens": 1, "kv_transfer_params": {}}
    out = continuation(body, delivered, chat=True)
    assert out is not None
    assert out["messages"] == [*CHAT["messages"], {"role": "assistant", "content": " the sea"}]
    assert out["continue_final_message"] is True and out["add_generation_prompt"] is False
    assert (out["max_tokens"], out["max_completion_tokens"], out["min_tokens"]) == (8, 6, 0)
    assert out["temperature"] == 0 and "kv_transfer_params" not in out
    # a client that already continued its own message: the text goes on after it
    own = {**CHAT, "messages": [{"role": "assistant", "content": "A"}],
           "continue_final_message": True}  # fmt: skip
    again = continuation(own, delivered, chat=True)
    assert again is not None and again["messages"] == [
        {"role": "assistant", "content": "A the sea"}
    ]
    assert continuation({**CHAT, "max_tokens": 2}, delivered, chat=True) is None  # all sent


def test_completions_continuation_is_prompt_plus_text() -> None:
    out = continuation(
        {"prompt": ["once"], "max_tokens": 5}, Delivered(tokens=1, parts=[" upon"]), chat=False
    )
    assert out == {"prompt": "once upon", "max_tokens": 4}


def test_splicer_keeps_one_id_one_role_and_counts_usage_once() -> None:
    delivered = Delivered(id="chatcmpl-a", model="m", created=7, role_sent=True, tokens=2)
    splicer = Splicer(delivered, chat=True)
    stream = (
        chunk(role=True, id_="chatcmpl-b", model="pod-model")
        + chunk(" and", id_="chatcmpl-b")
        + chunk(" so", finish="length", id_="chatcmpl-b")
        + usage(12, 2)  # the continuation's prompt re-read the 2 delivered tokens
        + b"data: [DONE]\n\n"
    )
    out = b"".join(splicer.edit(stream[i : i + 7]) for i in range(0, len(stream), 7))
    events = [e for e in out.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    parsed = [orjson.loads(e[6:]) for e in events[:-1]]
    assert {p["id"] for p in parsed} == {"chatcmpl-a"} and {p["created"] for p in parsed} == {7}
    assert not any("role" in c["delta"] for p in parsed for c in p["choices"])
    assert [c["delta"]["content"] for p in parsed for c in p["choices"]] == [" and", " so"]
    assert parsed[-1]["usage"] == {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}


async def chunks_of(*parts: bytes, then: BaseException | None = None) -> AsyncIterator[bytes]:
    for part in parts:
        yield part
    if then is not None:
        raise then


class Opened:
    def __init__(self, *parts: bytes) -> None:
        self.parts = parts
        self.released = False

    def chunks(self) -> AsyncIterator[bytes]:
        return chunks_of(*self.parts)

    def release(self) -> None:
        self.released = True


async def test_resumer_splices_the_continuation_after_a_break() -> None:
    bodies: list[dict[str, Any]] = []
    reports: list[tuple[str, str]] = []
    second = Opened(chunk(role=True, id_="x"), chunk(" c", finish="length", id_="x"), usage(4, 1))

    async def open_next(body: bytes, reason: str) -> Opened:
        bodies.append(orjson.loads(body))
        return second

    resumer = Resumer(
        orjson.dumps({**CHAT, "max_tokens": 3}),
        True,
        open_next,
        lambda reason, outcome, gap: reports.append((reason, outcome)),
    )
    first = chunks_of(chunk(role=True), chunk(" a"), chunk(" b"), then=ConnectionResetError())
    stream = resumer.stream(first)
    out = b"".join([c async for c in stream])
    await stream.aclose()
    assert bodies[0]["messages"][-1] == {"role": "assistant", "content": " a b"}
    assert bodies[0]["max_tokens"] == 1
    assert reports == [("connection", "resumed")] and second.released
    got = Delivered.read(out, chat=True)
    assert (got.text, got.tokens, got.id, got.blocker) == (" a b c", 3, "chatcmpl-a", "finished")


async def test_resumer_turns_an_error_event_into_a_break_and_gives_up_when_bounded() -> None:
    reports: list[tuple[str, str]] = []

    async def open_next(body: bytes, reason: str) -> None:
        return None  # no pod took it

    error = event({"error": {"message": "boom", "code": 500}})
    resumer = Resumer(orjson.dumps(CHAT), True, open_next, lambda r, o, g: reports.append((r, o)))
    got: list[bytes] = []
    with pytest.raises(Exception, match="error event"):
        async for part in resumer.stream(chunks_of(chunk(role=True) + chunk(" a") + error)):
            got.append(part)
    assert b"error" not in b"".join(got)  # the pod's event never reaches the client
    assert reports == [("error_event", "failed")]


async def test_a_pod_lost_before_any_byte_was_relayed_gets_the_request_again_whole() -> None:
    """The pod answered its headers and died before its first chunk (a crash during the
    prefill): the client has nothing, so the next pod gets the request as it was sent,
    less a P/D decode leg's `kv_transfer_params` (the dead pod may have read the blocks),
    counted `retried` with no gap. Silent before the first byte instead (a stall), the
    pod may be generating: not sent again (the data plane answers 504)."""
    bodies: list[bytes] = []
    reports: list[tuple[str, str, float | None]] = []

    async def open_next(body: bytes, reason: str) -> Opened:
        bodies.append(body)
        return Opened(chunk(role=True), chunk(" a", finish="length"))

    sent = orjson.dumps({**CHAT, "kv_transfer_params": {"remote_block_ids": [1]}})
    resumer = Resumer(sent, True, open_next, lambda r, o, g: reports.append((r, o, g)))
    stream = resumer.stream(chunks_of(then=ConnectionResetError()))
    out = b"".join([c async for c in stream])
    await stream.aclose()
    assert [orjson.loads(b) for b in bodies] == [CHAT]  # whole: no assistant message
    assert reports == [("connection", "retried", None)]
    assert Delivered.read(out, chat=True).text == " a"

    async def silent() -> AsyncIterator[bytes]:
        await asyncio.sleep(30)  # prefilling, or hung: the gateway cannot tell
        yield chunk(" never")

    quiet = Resumer(sent, True, open_next, lambda r, o, g: reports.append((r, o, g)))
    quiet.idle_timeout_s = 0.05
    with pytest.raises(TimeoutError):
        async for _ in quiet.stream(silent()):
            pass
    assert len(bodies) == 1 and len(reports) == 1


async def test_a_long_stream_is_kept_as_its_text() -> None:
    """Past 64 KiB the relayed events are read into text; what a resume sends is still
    every token delivered, in order."""
    bodies: list[dict[str, Any]] = []

    async def open_next(body: bytes, reason: str) -> Opened:
        bodies.append(orjson.loads(body))
        return Opened(chunk(" end", finish="length"))

    words = [f" w{i % 10}" for i in range(1500)]  # ~200 KB of events
    resumer = Resumer(
        orjson.dumps({**CHAT, "max_tokens": 1501}), True, open_next, lambda r, o, g: None
    )
    first = chunks_of(chunk(role=True), *(chunk(w) for w in words), then=ConnectionResetError())
    stream = resumer.stream(first)
    _ = [c async for c in stream]
    await stream.aclose()
    assert bodies[0]["messages"][-1]["content"] == "".join(words)
    assert bodies[0]["max_tokens"] == 1
    assert sum(len(c) for c in resumer._kept) < 70 * 2**10  # text, not events


async def test_a_silent_upstream_is_a_stall_and_is_resumed() -> None:
    """No chunk for the idle timeout while waiting on the upstream: a stall (one timer per
    stream); a stream that keeps talking is never cut."""

    reports: list[tuple[str, str]] = []

    async def open_next(body: bytes, reason: str) -> Opened:
        return Opened(chunk(" b", finish="length"))

    async def silent_after_one() -> AsyncIterator[bytes]:
        yield chunk(role=True) + chunk(" a")
        await asyncio.sleep(30)  # a hung pod
        yield chunk(" never")

    async def steady() -> AsyncIterator[bytes]:
        for _ in range(8):
            await asyncio.sleep(0.02)
            yield chunk(" x")

    def resumer() -> Resumer:
        return Resumer(
            orjson.dumps(CHAT),
            True,
            open_next,
            lambda r, o, g: reports.append((r, o)),
            idle_timeout_s=0.1,
        )

    stream = resumer().stream(silent_after_one())
    async with asyncio.timeout(10):
        got = Delivered.read(b"".join([c async for c in stream]), chat=True)
    assert got.text == " a b" and reports == [("stall", "resumed")]
    calm = resumer().stream(steady())
    assert len([c async for c in calm]) == 8 and len(reports) == 1
