"""The stream-usage edits of core/request/sse.py, in process: asking the engine for a
stream's usage, and taking the usage event out of the stream again, whatever the chunk
boundaries (vLLM's stream shape: `"usage": null` on every chunk once usage is asked
for, then one event with `"choices": []` and the usage, then `[DONE]`)."""

from __future__ import annotations

import orjson
import pytest

from inference_gateway.core.request.sse import (
    ModelNameRewriter,
    UsageEventFilter,
    ask_for_usage,
    chained,
)

USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"total_tokens":11}}\n\n'
TOKENS = b"".join(
    b'data: {"id":"c","model":"m-v2","choices":[{"index":0,"delta":{"content":"t%d"},'
    b'"finish_reason":null}],"usage":null}\n\n' % i
    for i in range(3)
)
STREAM = TOKENS + USAGE + b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("body", "asked"),
    [
        ({"model": "m", "stream": True}, True),
        ({"model": "m", "stream": True, "stream_options": {}}, True),
        ({"model": "m", "stream": True, "stream_options": None}, True),
        ({"model": "m", "stream": True, "stream_options": {"include_usage": False}}, True),
        ({"model": "m", "stream": True, "stream_options": {"include_usage": True}}, False),
        ({"model": "m", "stream": True, "stream_options": "x"}, False),  # the engine's 400
        ({"model": "m"}, False),
        ({"model": "m", "stream": False}, False),
    ],
)
def test_a_stream_asks_for_usage_unless_its_client_did(
    body: dict[str, object], asked: bool
) -> None:
    raw = b"  " + orjson.dumps(body)
    out = ask_for_usage(raw, body)
    assert (out is not None) == asked
    if out is not None:
        sent = orjson.loads(out)
        assert sent["stream_options"]["include_usage"] is True
        assert {k: v for k, v in sent.items() if k != "stream_options"} == {
            k: v for k, v in body.items() if k != "stream_options"
        }


@pytest.mark.parametrize("cut", range(0, len(STREAM), 7))
def test_the_usage_event_is_taken_out_wherever_the_chunks_break(cut: int) -> None:
    seen: list[bytes] = []
    edit = UsageEventFilter(seen.append)
    out = edit.stream_chunk(STREAM[:cut]) + edit.stream_chunk(STREAM[cut:]) + edit.flush()
    assert out == TOKENS + b"data: [DONE]\n\n"
    assert seen == [USAGE[:-1]]


def test_a_usage_event_with_choices_passes() -> None:
    """Some engines put usage on the last content chunk: that chunk is the client's."""
    last = b'data: {"choices":[{"delta":{"content":"x"}}],"usage":{"total_tokens":2}}\n\n'
    assert UsageEventFilter().stream_chunk(last) == last


def test_chained_edits_strip_then_rename() -> None:
    transform, flush = chained(UsageEventFilter(), ModelNameRewriter("m"))
    assert transform is not None and flush is not None
    out = transform(STREAM[:50]) + transform(STREAM[50:]) + flush()
    assert b'"m-v2"' not in out and b'"usage":{' not in out and out.endswith(b"[DONE]\n\n")
    assert chained(None, None) == (None, None)
