"""The emulator continues an answer as vLLM's OpenAI server does, so a gateway that resumes
a broken stream can be checked byte for byte.

vLLM's semantics (vllm/entrypoints/openai/protocol.py, `ChatCompletionRequest`:
`continue_final_message` "the final message in the chat will be open-ended, without any
EOS tokens; the model will continue this message rather than starting a new one", and
its `check_generation_prompt` validator: "Cannot set both `continue_final_message` and
`add_generation_prompt` to True." as a 400); completions simply take the longer prompt.
At temperature 0 the emulator's tokens are a function of the prompt rendering and the
position, so an answer cut after `k` tokens and continued gives the unbroken text.
"""

from __future__ import annotations

import openai
import pytest

from inference_gateway.emulator.behaviors import PodBehavior
from inference_gateway.emulator.profiles import pod_profile
from inference_gateway.emulator.server import EmulatedPod
from inference_gateway.emulator.tokens import count_tokens, render_chat

MODEL = "llama-3.1-8b"
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Tell me about the sea, at length."},
]


def client(pod: EmulatedPod) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{pod.url}/v1", api_key="unused", max_retries=0)


async def chat_text(pod: EmulatedPod, messages: list[dict[str, str]], **extra: object) -> str:
    reply = await client(pod).chat.completions.create(
        model=MODEL, messages=messages, temperature=0, **extra
    )
    content = reply.choices[0].message.content
    assert content is not None
    return content


@pytest.mark.parametrize("cut", [1, 17, 63])
async def test_chat_continued_after_k_tokens_is_the_unbroken_text(
    pod: EmulatedPod, cut: int
) -> None:
    whole = await chat_text(pod, MESSAGES, max_tokens=64)
    assert count_tokens(whole) == 64
    so_far = whole[: cut * 4]
    rest = await chat_text(
        pod,
        [*MESSAGES, {"role": "assistant", "content": so_far}],
        max_tokens=64 - cut,
        extra_body={"continue_final_message": True, "add_generation_prompt": False},
    )
    assert so_far + rest == whole
    # a new turn (the default) is not a continuation: it starts its own answer
    fresh = await chat_text(
        pod, [*MESSAGES, {"role": "assistant", "content": so_far}], max_tokens=64 - cut
    )
    assert so_far + fresh != whole


async def test_chat_continued_without_max_tokens_ends_where_the_unbroken_one_does(
    pod: EmulatedPod,
) -> None:
    whole = await chat_text(pod, MESSAGES)
    so_far = whole[:20]  # 5 tokens
    rest = await chat_text(
        pod,
        [*MESSAGES, {"role": "assistant", "content": so_far}],
        extra_body={"continue_final_message": True, "add_generation_prompt": False},
    )
    assert so_far + rest == whole


async def test_continued_prompt_is_counted_as_rendered(pod: EmulatedPod) -> None:
    messages = [*MESSAGES, {"role": "assistant", "content": " the sea"}]
    reply = await client(pod).chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=3,
        extra_body={"continue_final_message": True, "add_generation_prompt": False},
    )
    rendered = render_chat(messages, add_generation_prompt=False, continue_final_message=True)
    assert rendered == render_chat(MESSAGES) + " the sea"
    assert reply.usage is not None and reply.usage.prompt_tokens == count_tokens(rendered)


async def test_both_flags_true_is_vllms_400(pod: EmulatedPod) -> None:
    with pytest.raises(openai.BadRequestError, match="Cannot set both"):
        await chat_text(
            pod,
            [*MESSAGES, {"role": "assistant", "content": " the"}],
            max_tokens=3,
            extra_body={"continue_final_message": True, "add_generation_prompt": True},
        )


async def test_completions_prompt_plus_text_so_far_continues(pod: EmulatedPod) -> None:
    api = client(pod)
    prompt = "Once upon a time"
    whole = await api.completions.create(model=MODEL, prompt=prompt, max_tokens=40, temperature=0)
    text = whole.choices[0].text
    rest = await api.completions.create(
        model=MODEL, prompt=prompt + text[:48], max_tokens=28, temperature=0
    )
    assert text[:48] + rest.choices[0].text == text


async def test_stream_error_fault_ends_with_vllms_error_event() -> None:
    pod = EmulatedPod(
        "faulty",
        pod_profile("H100", MODEL),
        behavior=PodBehavior(stream_error_after_tokens=5),
    )
    await pod.start()
    try:
        stream = await client(pod).chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=50,
            stream=True,  # type: ignore[arg-type]
        )
        contents: list[str] = []
        with pytest.raises(openai.APIError, match="EngineCore"):
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    contents.append(chunk.choices[0].delta.content)
        assert len(contents) == 5
    finally:
        await pod.stop()
