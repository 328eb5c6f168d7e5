"""Token ids of a request's prompt, as the model server will see them.

The `precise-prefix-cache-scorer` hashes token ids the way vLLM does, so it needs the
pod's own tokenization: the chat template renders the messages, the tokenizer turns the
text into ids. Two implementations of one small interface:

* `EmulatorTokenizer`: the emulator's documented rule (one token per 4 bytes of UTF-8,
  the id the 4 bytes read big-endian; chat template `<|role|>\\n{content}\\n` per message,
  then `<|assistant|>\\n`). The emulator's HTTP server tokenizes with it, so a picker in
  front of emulated pods hashes exactly what they cache.
* `hf_tokenizer.HFTokenizer`: a real model's files, loaded from a local directory only
  (never from a hub), the chat template applied and the text tokenized as the pinned
  vLLM release does (that module's docstring says how, source by source).

A body this cannot read (no messages, a malformed content part) gives `None`: the
scorer then falls back to the approximate index for that request.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = [
    "EmulatorTokenizer",
    "PromptTokenizer",
    "render_chat",
    "template_flags",
    "text_ids",
]

BYTES_PER_TOKEN = 4


class PromptTokenizer(Protocol):
    def prompt_ids(self, body: Mapping[str, Any]) -> list[int] | None: ...


def _content_text(content: Any) -> str:
    """A message's content: a string, or OpenAI content parts of which the text counts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if not isinstance(part, Mapping):
                raise ValueError("content parts must be objects")
            if part.get("type") == "text":
                parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise ValueError("content must be a string or a list of content parts")


def render_chat(
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
) -> str:
    """The emulator's chat template (prefix-stable: a longer conversation extends it).
    `continue_final_message` (vLLM's request field) leaves the last message open, its
    text the start of what the model continues, with no generation prompt after it:
    an assistant message so continued renders as the prompt of the answer it began
    followed by its text."""
    out = []
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError("each message must be an object")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError("each message needs a string 'role'")
        end = "" if continue_final_message and i == last else "\n"
        out.append(f"<|{role}|>\n{_content_text(message.get('content'))}{end}")
    if add_generation_prompt and not continue_final_message:
        out.append("<|assistant|>\n")
    return "".join(out)


def template_flags(body: Mapping[str, Any]) -> dict[str, bool]:
    """A chat body's `add_generation_prompt` (default true) and `continue_final_message`
    (default false), as vLLM reads them; ValueError when not booleans or both true
    (vLLM's ChatCompletionRequest.check_generation_prompt)."""
    add = body.get("add_generation_prompt", True)
    cont = body.get("continue_final_message", False)
    if not isinstance(add, bool) or not isinstance(cont, bool):
        raise ValueError("'add_generation_prompt' and 'continue_final_message' must be booleans")
    if add and cont and "add_generation_prompt" in body:
        raise ValueError(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        )
    return {"add_generation_prompt": add, "continue_final_message": cont}


def text_ids(text: str | bytes) -> list[int]:
    """The emulator's token ids: each 4 bytes (the last zero-padded) read big-endian."""
    data = text.encode() if isinstance(text, str) else text
    tail = -len(data) % BYTES_PER_TOKEN
    if tail:
        data += b"\0" * tail
    return list(struct.unpack(f">{len(data) // BYTES_PER_TOKEN}I", data))


def _prompt(body: Mapping[str, Any]) -> str | None:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    return prompt if isinstance(prompt, str) else None


class EmulatorTokenizer:
    def prompt_ids(self, body: Mapping[str, Any]) -> list[int] | None:
        messages = body.get("messages")
        try:
            text = (
                render_chat(messages, **template_flags(body))
                if isinstance(messages, list)
                else _prompt(body)
            )
        except ValueError:
            return None
        return text_ids(text) if text else None
