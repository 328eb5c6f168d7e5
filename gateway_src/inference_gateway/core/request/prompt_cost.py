"""What a token limit charges for a request's prompt before any pod has seen it: an
estimate of every token the engine will prefill, the same at tier 1 (`igw serve`,
`igw picker`) and tier 2 (`igw global`). The answer's `usage` settles the charge
exactly afterwards (core/request/budget.py); this estimate decides admission, so it
must not be one a client can shrink at will.

Counted, at 4 bytes of UTF-8 a token (the emulator's tokenizer, emulator/tokens.py, and
roughly what BPE tokenizers give for English; bytes, not characters, so 7,000 emoji
are 28,000 bytes, not 7,000 characters):

* chat `messages`: each message's role and text (its content, or the text of its
  content parts), the JSON of its `tool_calls` (and legacy `function_call`), and its
  `name`, `tool_call_id` and reasoning text, two bytes of template per message;
* the JSON of `tools` (and legacy `functions`), which chat templates render into the
  prompt;
* completions `prompt`: a string by its bytes; token ids by their count (one each,
  exactly what the engine prefills), a batch of either summed;
* a non-text content part (an image, audio, video, a file) as `MEDIA_PART_TOKENS`
  whatever its size: what a vision encoder makes of an image depends on its pixels,
  not on the bytes of its encoding, and charging a photo's megabytes of base64 as text
  would refuse every image; the settlement charges what the engine reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["BYTES_PER_TOKEN", "MEDIA_PART_TOKENS", "prompt_estimate"]

BYTES_PER_TOKEN = 4
#: One image's tokens, up front: OpenAI's vision guide prices a 1024×1024 image at
#: `detail: high` at 765 tokens (LLaVA-1.5's 336-px image is 576).
MEDIA_PART_TOKENS = 765
_TEXT_PARTS = frozenset({"text", "input_text"})
_MESSAGE_TEXT = ("name", "tool_call_id", "reasoning_content", "reasoning", "refusal")
_MESSAGE_JSON = ("tool_calls", "function_call")
_TOOLS = ("tools", "functions")


def prompt_estimate(body: Mapping[str, Any]) -> int:
    """The prompt tokens a token limit charges for `body` (module docstring)."""
    size, tokens = 0, 1
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, Mapping):
                more, media = _message(message)
                size += more
                tokens += media
    else:
        more, ids = _prompt(body.get("prompt"))
        size += more
        tokens += ids
    for key in _TOOLS:
        if body.get(key):
            size += _json_bytes(body[key])
    return tokens + size // BYTES_PER_TOKEN


def _message(message: Mapping[str, Any]) -> tuple[int, int]:
    """(bytes of text, media tokens) of one chat message."""
    size = _text_bytes(message.get("role")) + 2
    media = 0
    content = message.get("content")
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, Mapping):
                size += _json_bytes(part)
            elif part.get("type") in _TEXT_PARTS:
                size += _text_bytes(part.get("text"))
            else:
                media += MEDIA_PART_TOKENS
    elif content is not None:
        size += _text_bytes(content)
    for key in _MESSAGE_TEXT:
        size += _text_bytes(message.get(key))
    for key in _MESSAGE_JSON:
        if message.get(key):
            size += _json_bytes(message[key])
    return size, media


def _prompt(prompt: Any) -> tuple[int, int]:
    """(bytes of text, token ids) of a completions prompt."""
    if isinstance(prompt, str):
        return _text_bytes(prompt), 0
    if not isinstance(prompt, list):
        return _text_bytes(prompt), 0
    if all(isinstance(p, int) for p in prompt):
        return 0, len(prompt)
    size, ids = 0, 0
    for item in prompt:  # a batch: strings, or lists of ids
        if isinstance(item, list):
            ids += len(item)
        else:
            size += _text_bytes(item)
    return size, ids


def _text_bytes(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    return _json_bytes(value)


def _json_bytes(value: Any) -> int:
    try:
        return len(orjson.dumps(value))
    except TypeError:  # not JSON-encodable (it came from JSON, so never in practice)
        return len(str(value))
