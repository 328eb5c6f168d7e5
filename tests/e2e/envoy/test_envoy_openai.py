"""The openai SDK through real Envoy 1.40 → `igw bbr` → `igw picker` → emulated pods.

Envoy's config is the one Envoy Gateway v1.5 + Envoy AI Gateway v0.4 would build for the
GitOps tree (`inference_gateway.envoyproxy.bootstrap`; the rendered-tree agreement is
tests/cdk8s/test_envoy_bootstrap_agrees.py). What the client sees is what a cluster's
client would see.
"""

from __future__ import annotations

from collections.abc import Callable

from envoy_harness import EnvoyStack


async def test_chat_and_stream_reach_the_pod_the_picker_named(
    envoy_stack: Callable[..., EnvoyStack],
) -> None:
    async with envoy_stack() as stack:
        client = stack.client()
        reply = await client.chat.completions.create(
            model="llama-3.1-8b", messages=[{"role": "user", "content": "hi"}], max_tokens=8
        )
        assert reply.choices[0].message.content
        assert reply.usage is not None and reply.usage.completion_tokens == 8
        stream = await client.chat.completions.create(
            model="llama-3.1-8b",
            messages=[{"role": "user", "content": "stream"}],
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text and chunks[-1].usage is not None
        assert chunks[-1].usage.completion_tokens == 6
        await client.close()
        lines = await stack.wait_access_log(2)
        assert [line["code"] for line in lines] == [200, 200]
        for line in lines:  # ORIGINAL_DST connected to exactly the pod the picker named
            assert line["destination"] and line["upstream"] == line["destination"]
            assert line["model"] == "llama-3.1-8b"
