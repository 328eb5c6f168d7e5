"""Reading `usage` out of a model server's answer as it passes through, without holding
streams: both data planes count output tokens and settle token-rate charges from it."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "UsageScanner",
    "body_output_tokens",
    "cached_tokens",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "usage_of",
]


class UsageScanner:
    """Finds the `usage` object in a response body without holding SSE streams.

    SSE: only complete lines that mention `"usage"` are parsed (the last one wins, as
    vLLM sends usage in the final event). JSON: the body is kept up to a bound and
    parsed once at the end.
    """

    def __init__(self, streaming: bool, limit: int) -> None:
        self.streaming = streaming
        self.limit = limit
        self.usage: dict[str, Any] | None = None
        self._partial = b""
        self._kept: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        if not self.streaming:
            self._size += len(chunk)
            if self._size <= self.limit:
                self._kept.append(chunk)
            return
        data = self._partial + chunk if self._partial else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            self._partial = data
            return
        self._partial = data[cut + 1 :]
        if data.find(b'"usage"', 0, cut) >= 0:  # no copy of the chunk to look
            for line in data[:cut].split(b"\n"):
                if b'"usage"' in line and line.startswith(b"data:") and not _null(line):
                    self._take(line[5:])

    def close(self) -> dict[str, Any] | None:
        if self.streaming:
            if self._partial.startswith(b"data:") and b'"usage"' in self._partial:
                self._take(self._partial[5:])
        elif self._size <= self.limit:
            self._take(b"".join(self._kept))
        return self.usage

    def _take(self, payload: bytes) -> None:
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        usage = usage_of(event)
        if usage is not None:
            self.usage = usage


def _null(line: bytes) -> bool:
    """vLLM (and OpenAI) put `"usage": null` in every chunk of a stream that asked for
    usage; only the last event carries it: the rest are not parsed."""
    return b'"usage":null' in line or b'"usage": null' in line


def usage_of(event: Any) -> dict[str, Any] | None:
    """`usage` of a chat/completions body or chunk, or of a Responses API body or its
    `response.completed` event (there it sits inside `response`)."""
    if not isinstance(event, dict):
        return None
    usage = event.get("usage")
    if not isinstance(usage, dict) and isinstance(event.get("response"), dict):
        usage = event["response"].get("usage")
    return usage if isinstance(usage, dict) else None


def _count(usage: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def output_tokens(usage: dict[str, Any]) -> int | None:
    """Generated tokens: `completion_tokens` (chat/completions) or `output_tokens`
    (Responses API)."""
    return _count(usage, "completion_tokens", "output_tokens")


def input_tokens(usage: dict[str, Any]) -> int | None:
    """Prompt tokens: `prompt_tokens` (chat/completions) or `input_tokens` (Responses)."""
    return _count(usage, "prompt_tokens", "input_tokens")


def cached_tokens(usage: dict[str, Any]) -> int | None:
    """Prompt tokens the engine served from its prefix cache, where it says
    (`prompt_tokens_details.cached_tokens`; vLLM with `--enable-prompt-tokens-details`)."""
    for key in ("prompt_tokens_details", "input_tokens_details"):
        details = usage.get(key)
        if isinstance(details, dict):
            return _count(details, "cached_tokens")
    return None


def total_tokens(usage: dict[str, Any]) -> int | None:
    """Prompt plus generated tokens, as reported or summed; None when the pod's usage
    does not say (a nonsense value never counts)."""
    total = _count(usage, "total_tokens")
    if total is not None:
        return total
    prompt = _count(usage, "prompt_tokens", "input_tokens")
    output = output_tokens(usage)
    return None if prompt is None or output is None else prompt + output


def body_output_tokens(body: bytes) -> int | None:
    """The output tokens a whole JSON answer reports, or None (what a token budget counts
    of an answer that did not stream, at tier 1 and tier 2)."""
    try:
        usage = usage_of(orjson.loads(body))
    except orjson.JSONDecodeError:
        return None
    return output_tokens(usage) if usage is not None else None
