"""The official `openai` SDK against an emulated pod, unchanged: streaming and not."""

from __future__ import annotations

import asyncio

import openai
import pytest

from inference_gateway.emulator.server import EmulatedPod
from inference_gateway.emulator.tokens import count_tokens, render_chat

SYSTEM = "You are a terse assistant that answers questions about SQL databases. " * 20


def client(pod: EmulatedPod) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{pod.url}/v1", api_key="unused", max_retries=0)


async def test_chat_non_streaming(pod: EmulatedPod) -> None:
    messages = [{"role": "user", "content": "Say hello."}]
    reply = await client(pod).chat.completions.create(
        model="llama-3.1-8b", messages=messages, max_tokens=7
    )
    assert reply.object == "chat.completion"
    assert reply.model == "llama-3.1-8b"
    assert reply.id.startswith("chatcmpl-")
    choice = reply.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant"
    assert choice.message.content is not None and len(choice.message.content.split()) == 7
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 7
    assert reply.usage.prompt_tokens == count_tokens(render_chat(messages))
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 7


async def test_chat_streaming_with_usage(pod: EmulatedPod) -> None:
    stream = await client(pod).chat.completions.create(
        model="llama-3.1-8b",
        messages=[{"role": "user", "content": "Count to twenty."}],
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    content = [c.choices[0].delta.content for c in chunks if c.choices]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len([c for c in content if c]) == 20
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 20
    assert len({c.id for c in chunks}) == 1


async def test_completions_streaming_and_not_agree(pod: EmulatedPod) -> None:
    api = client(pod)
    whole = await api.completions.create(model="llama-3.1-8b", prompt="Tell me a story")
    assert whole.object == "text_completion"
    assert whole.choices[0].finish_reason == "stop"  # no max_tokens: a natural stop
    assert whole.usage is not None and 16 <= whole.usage.completion_tokens <= 256
    stream = await api.completions.create(
        model="llama-3.1-8b", prompt="Tell me a story", stream=True
    )
    text = "".join([c.choices[0].text async for c in stream])
    assert text == whole.choices[0].text  # deterministic filler from the prompt
    assert count_tokens(text) == whole.usage.completion_tokens


async def test_adapter_by_model_name(pod: EmulatedPod) -> None:
    api = client(pod)
    models = await api.models.list()
    by_id = {m.id: m for m in models.data}
    assert set(by_id) == {"llama-3.1-8b", "sql", "support"}
    assert by_id["sql"].model_extra is not None and by_id["sql"].model_extra["parent"] == (
        "llama-3.1-8b"
    )
    reply = await api.chat.completions.create(
        model="sql", messages=[{"role": "user", "content": "SELECT 1"}], max_tokens=3
    )
    assert reply.model == "sql"
    assert reply.usage is not None and reply.usage.completion_tokens == 3


async def test_unknown_model_is_404(pod: EmulatedPod) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await client(pod).chat.completions.create(
            model="gpt-17", messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 404
    assert "gpt-17" in caught.value.message


async def test_bad_request_is_400(pod: EmulatedPod) -> None:
    with pytest.raises(openai.BadRequestError):
        await client(pod).chat.completions.create(model="llama-3.1-8b", messages=[])
    with pytest.raises(openai.BadRequestError):
        await client(pod).completions.create(model="llama-3.1-8b", prompt="x", max_tokens=0)


async def test_shared_system_prompt_hits_the_prefix_cache(pod: EmulatedPod) -> None:
    api = client(pod)
    cached = []
    for question in ("What is an index?", "What is a join?"):
        reply = await api.chat.completions.create(
            model="llama-3.1-8b",
            messages=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": question},
            ],
            max_tokens=2,
        )
        assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
        cached.append(reply.usage.prompt_tokens_details.cached_tokens)
    shared_blocks = len(f"<|system|>\n{SYSTEM}\n".encode()) // 64
    assert cached[0] == 0
    assert cached[1] == shared_blocks * 16


async def test_many_concurrent_streams(pod: EmulatedPod) -> None:
    api = client(pod)

    async def one(i: int) -> int:
        stream = await api.chat.completions.create(
            model="sql" if i % 3 == 0 else "llama-3.1-8b",
            messages=[{"role": "user", "content": f"request {i} " * (i + 1)}],
            max_tokens=30 + i,
            stream=True,
            stream_options={"include_usage": True},
        )
        tokens = 0
        usage = None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                tokens += 1
            usage = chunk.usage or usage
        assert usage is not None and usage.completion_tokens == tokens
        return tokens

    counts = await asyncio.gather(*(one(i) for i in range(40)))
    assert counts == [30 + i for i in range(40)]
