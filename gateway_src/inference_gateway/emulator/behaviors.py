"""How an emulated pod answers tool calls, and how it can be made to misbehave on purpose.

A backend benchmark (`igw bench backends`) scores tool-call correctness and determinism at
temperature 0. To test that the scores catch a bad backend, the emulator must be able to
*be* one; these pure functions hold the rules, and `server.py` applies them.

**Tool calls.** A chat request with a non-empty `tools` list (and `tool_choice` not
`"none"`) is answered with one call to the first listed tool — or to the function that
`tool_choice` names. The emulator understands one kind of argument: a numeric comparison
stated in plain English in the last user message, the way a person would ask it::

    "How many IDs are greater than 420?"   → {"op": "gt", "value": 420}
    "Count the IDs at most 17."            → {"op": "le", "value": 17}

Phrases (longest match first, case-insensitive, followed by an integer):
`not equal to` → `ne`, `greater than or equal to` / `at least` → `ge`,
`less than or equal to` / `at most` → `le`, `greater than` / `more than` / `above` → `gt`,
`less than` / `fewer than` / `below` → `lt`, `equal to` / `exactly` → `eq`.
When the tool's JSON schema has no `op`/`value` properties, or no phrase is found, the
call carries empty arguments `{}`. Tool calls are answered in non-streaming replies only;
a streaming request with tools gets ordinary text (a documented simplification).

**Imperfection** (`PodBehavior`, all default off):

* `tool_call_miss_rate` — that fraction of tool requests is answered with text and no
  call; `tool_call_error_rate` — that fraction is answered with a call whose `value` is
  off by one. Which requests are hit is a deterministic function of the prompt and
  `seed` (`unit_hash`), so a benchmark's two runs see the same mistakes, as a model with
  a systematic weakness would show them.
* `temperature0_jitter` — that fraction of `temperature: 0` requests gets output words
  shifted by a per-pod counter instead of the prompt's own sequence, so repeats of one
  prompt come back different (as batch-dependent kernels make real engines do). Drawn from
  a per-pod `random.Random(seed)`; other temperatures stay deterministic.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import xxhash
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "COMPARISON_PHRASES",
    "Jitter",
    "PodBehavior",
    "ToolCall",
    "ToolDecision",
    "decide_tool_call",
    "parse_comparison",
    "unit_hash",
]

# Longest phrases first, so "greater than or equal to" wins over "greater than".
COMPARISON_PHRASES: tuple[tuple[str, str], ...] = (
    ("greater than or equal to", "ge"),
    ("less than or equal to", "le"),
    ("not equal to", "ne"),
    ("greater than", "gt"),
    ("more than", "gt"),
    ("fewer than", "lt"),
    ("less than", "lt"),
    ("at least", "ge"),
    ("at most", "le"),
    ("equal to", "eq"),
    ("exactly", "eq"),
    ("above", "gt"),
    ("below", "lt"),
)
_COMPARISON = re.compile(
    r"\b(" + "|".join(re.escape(p) for p, _ in COMPARISON_PHRASES) + r")\s+(-?\d+)\b",
    re.IGNORECASE,
)
_OP_OF = dict(COMPARISON_PHRASES)


class PodBehavior(BaseModel):
    """Deliberate imperfections of one pod (fleet file key `behavior`); all off by default.
    `stream_interval` is vLLM's `--stream-interval` (`OutputProcessor`): a stream's event
    carries that many tokens (the last event what is left), as with speculative decoding,
    which a gateway counting one token per event would under-count.
    `stream_error_after_tokens` (0: off): every stream of the pod ends after that many
    tokens with vLLM's mid-stream error event, as when its engine fails."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool_call_miss_rate: float = Field(default=0.0, ge=0, le=1)
    tool_call_error_rate: float = Field(default=0.0, ge=0, le=1)
    temperature0_jitter: float = Field(default=0.0, ge=0, le=1)
    stream_interval: int = Field(default=1, ge=1, le=1024)
    stream_error_after_tokens: int = Field(default=0, ge=0)
    seed: int = 0


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it


@dataclass(frozen=True)
class ToolDecision:
    """What to answer a tool request with: a call, or `None` for a plain text reply."""

    call: ToolCall | None


def unit_hash(text: str, seed: int, salt: str) -> float:
    """A deterministic number in [0, 1) from the prompt, the pod's seed and a purpose."""
    digest = xxhash.xxh64_intdigest(f"{salt}\0{text}".encode(), seed=seed & (2**64 - 1))
    return digest / 2**64


def parse_comparison(text: str) -> tuple[str, int] | None:
    """The first `(op, value)` phrase of the module docstring in `text`, if any."""
    match = _COMPARISON.search(text)
    if match is None:
        return None
    return _OP_OF[match.group(1).lower()], int(match.group(2))


def _last_user_text(messages: Sequence[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _chosen_function(tools: Sequence[Any], tool_choice: Any) -> Mapping[str, Any] | None:
    functions = [
        t["function"]
        for t in tools
        if isinstance(t, Mapping) and isinstance(t.get("function"), Mapping)
    ]
    if isinstance(tool_choice, Mapping):
        wanted = (tool_choice.get("function") or {}).get("name")
        return next((f for f in functions if f.get("name") == wanted), None)
    return functions[0] if functions else None


def decide_tool_call(
    body: Mapping[str, Any], prompt_text: str, behavior: PodBehavior
) -> ToolDecision | None:
    """`None` when the request asks for no tool; else the call (or text) to answer with."""
    tools = body.get("tools")
    tool_choice = body.get("tool_choice")
    if not isinstance(tools, list) or not tools or tool_choice == "none":
        return None
    function = _chosen_function(tools, tool_choice)
    if function is None or not isinstance(function.get("name"), str):
        return None
    roll = unit_hash(prompt_text, behavior.seed, "tool")
    if roll < behavior.tool_call_miss_rate and tool_choice in (None, "auto"):
        return ToolDecision(call=None)
    properties = (function.get("parameters") or {}).get("properties") or {}
    arguments: dict[str, Any] = {}
    messages = body.get("messages")
    comparison = parse_comparison(_last_user_text(messages if isinstance(messages, list) else []))
    if comparison is not None and {"op", "value"} <= set(properties):
        op, value = comparison
        if roll < behavior.tool_call_miss_rate + behavior.tool_call_error_rate:
            value += 1
        arguments = {"op": op, "value": value}
    return ToolDecision(call=ToolCall(function["name"], orjson.dumps(arguments).decode()))


class Jitter:
    """Per-pod source of temperature-0 nondeterminism (`PodBehavior.temperature0_jitter`)."""

    def __init__(self, behavior: PodBehavior) -> None:
        self.rate = behavior.temperature0_jitter
        self._random = random.Random(behavior.seed)
        self._shift = itertools.count(1)

    def output_seed(self, prompt_seed: int, temperature: Any) -> int:
        """The prompt's seed, or (jittered) that seed shifted by a fresh per-pod count."""
        if self.rate <= 0 or temperature != 0 or self._random.random() >= self.rate:
            return prompt_seed
        return prompt_seed + next(self._shift)
