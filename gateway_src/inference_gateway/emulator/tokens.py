"""The emulator's one tokenization rule, its chat template and its filler output.

There is no real tokenizer here, so one documented deterministic rule stands in for it:

* **One token is 4 bytes of UTF-8 text** (the last token may be shorter):
  `prompt_tokens = ceil(len(text.encode()) / 4)`, at least 1. English BPE tokenizers
  average about 4 characters per token, so counts land near the real ones.
* **Prefix blocks** are 16 tokens, as vLLM's block size, hashed from token ids as vLLM
  hashes them (`protocols.vllm.block_hashing`); the token ids are the 4-byte chunks read
  big-endian (`protocols.vllm.prompt_tokens.text_ids`), so a picker that tokenizes with the
  same rule (`EmulatorTokenizer`) predicts this pod's cache exactly; an adapter's name
  is in every block's key, so it never shares cache blocks with its base model.
* **Chat template**: each message becomes `<|role|>\\n{content}\\n`, then `<|assistant|>\\n`
  is appended (a generation prompt), in `protocols.vllm.prompt_tokens.render_chat` (the
  picker renders with the same function). Messages are rendered in order, so requests
  that share a system prompt share a token prefix and hit the prefix cache.
* **Output** is filler: each output token is one space and a three-letter word from a
  fixed list (exactly 4 bytes, so re-tokenizing the output by the rule above gives back
  its token count), cycled from a seed derived from the prompt. Length is `max_tokens`
  when the client gives it (as benchmarks' `ignore_eos` runs do), else a deterministic
  length in [16, 256] from the prompt hash.
* **Continuing** (`output_start`), as vLLM continues: a chat request with
  `continue_final_message` whose last message is the assistant's answers from where that
  message's text stops: its words and default length are the ones of the request without
  that message, from token `k` on (`k` the message's tokens), so an answer interrupted
  after `k` tokens and resumed gives, at temperature 0, exactly the unbroken text. A
  completions prompt that ends with a filler token continues the word cycle from it
  (the prompt plus the text so far resumes it; its default length is the new prompt's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import xxhash

from inference_gateway.protocols.vllm.prompt_tokens import render_chat

__all__ = [
    "BLOCK_BYTES",
    "BYTES_PER_TOKEN",
    "DEFAULT_OUTPUT_RANGE",
    "WORDS",
    "count_tokens",
    "default_output_tokens",
    "filler_text",
    "filler_tokens",
    "output_start",
    "prompt_seed",
    "render_chat",
]

BYTES_PER_TOKEN = 4
BLOCK_BYTES = 16 * BYTES_PER_TOKEN  # one vLLM KV block of 16 tokens
DEFAULT_OUTPUT_RANGE = (16, 256)

# Three-letter words, so " " + word is exactly one 4-byte token.
WORDS: tuple[str, ...] = (
    "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her",
    "was", "one", "our", "out", "day", "get", "has", "him", "his", "how", "man", "new",
    "now", "old", "see", "two", "way", "who", "boy", "did", "its", "let", "put", "say",
    "she", "too", "use", "sky", "sea", "sun", "air", "art", "bus", "cap", "dog", "egg",
    "fan", "gym", "hat", "ice", "jam", "key", "lab", "map", "net", "oak", "pan", "bed",
    "cup", "fox", "gum", "ink",
)  # fmt: skip
_TOKEN_BYTES: tuple[bytes, ...] = tuple(f" {w}".encode() for w in WORDS)


def count_tokens(text: str | bytes) -> int:
    """Prompt tokens of `text` by the 4-bytes-per-token rule (at least 1)."""
    data = text.encode() if isinstance(text, str) else text
    return max(1, -(-len(data) // BYTES_PER_TOKEN))


def prompt_seed(text: str | bytes) -> int:
    """A 64-bit seed from the whole prompt: picks the filler words and default length."""
    data = text.encode() if isinstance(text, str) else text
    return xxhash.xxh64_intdigest(data)


def default_output_tokens(seed: int) -> int:
    """Deterministic output length in DEFAULT_OUTPUT_RANGE for a prompt without max_tokens."""
    low, high = DEFAULT_OUTPUT_RANGE
    return low + (seed >> 8) % (high - low + 1)


def filler_tokens(seed: int, start: int, stop: int) -> list[bytes]:
    """Output tokens `start` .. `stop - 1` as UTF-8 bytes (each exactly 4 bytes)."""
    n = len(_TOKEN_BYTES)
    return [_TOKEN_BYTES[(seed + i) % n] for i in range(start, stop)]


def filler_text(seed: int, start: int, stop: int) -> str:
    """Output tokens `start` .. `stop - 1` joined as text."""
    return b"".join(filler_tokens(seed, start, stop)).decode()


class OutputStart(NamedTuple):
    """Where an answer starts: token `i` of it is word `(seed + i) % len(WORDS)`; its
    default length is `default_output_tokens(length_seed) - done` (`done`: tokens of the
    answer the prompt already holds)."""

    seed: int
    length_seed: int
    done: int


def output_start(
    text: str, messages: Sequence[Mapping[str, Any]] | None, *, continued: bool
) -> OutputStart:
    """The start of the answer to the rendered prompt `text` (`messages`: a chat request's;
    `continued`: its `continue_final_message`)."""
    if messages is not None:
        last: Mapping[str, Any] = messages[-1] if messages else {}
        content = last.get("content")
        if continued and last.get("role") == "assistant" and isinstance(content, str):
            base = prompt_seed(render_chat(messages[:-1]))
            done = -(-len(content.encode()) // BYTES_PER_TOKEN)
            return OutputStart(base + done, base, done)
        seed = prompt_seed(text)
        return OutputStart(seed, seed, 0)
    seed = prompt_seed(text)
    tail = text.encode()[-BYTES_PER_TOKEN:]
    if tail in _TOKEN_BYTES:
        return OutputStart(_TOKEN_BYTES.index(tail) + 1, seed, 0)
    return OutputStart(seed, seed, 0)
