"""A minimal OpenAI-compatible chat client that measures what the benchmark needs.

Why not the `openai` SDK: time to first token needs the raw SSE stream with our own
clock, and every failure — refused connection, timeout, HTTP error, an answer that is not
OpenAI-shaped — must become one `BackendError` with a reason a person can act on, so one
bad backend is reported and the others still run. Library errors (aiohttp, JSON) are
translated here and nowhere else.

    BackendError            the backend cannot be benchmarked: `reason` says why
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from inference_gateway.core.request.latency import time_per_output_token
from inference_gateway.errors import InferenceGatewayError

__all__ = ["BackendError", "ChatClient", "StreamResult"]


class BackendError(InferenceGatewayError):
    """One backend failed; `reason` is the sentence shown in the report."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class StreamResult:
    ttft_s: float
    e2e_s: float
    completion_tokens: int
    text: str

    @property
    def tokens_per_s(self) -> float:
        """Output tokens over the whole request, time to first token included."""
        return self.completion_tokens / self.e2e_s if self.e2e_s > 0 else 0.0

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (None for a one-token answer)."""
        return time_per_output_token(self.ttft_s, self.e2e_s, self.completion_tokens)


def _not_openai(what: str) -> BackendError:
    return BackendError(f"not an OpenAI-compatible answer: {what}")


class ChatClient:
    """`POST {base_url}/chat/completions` for one backend, on a caller-owned session."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        timeout_s: float,
    ) -> None:
        self._session = session
        self._url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._timeout_s = timeout_s

    async def complete(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A non-streaming completion; returns the parsed, shape-checked JSON."""
        payload = {"model": self.model, **body, "stream": False}
        try:
            async with self._session.post(
                self._url, json=payload, headers=self._headers, timeout=self._timeout
            ) as response:
                raw = await response.read()
                self._check_status(response.status, raw)
        except (aiohttp.ClientError, TimeoutError) as error:
            raise self._translate(error) from None
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise _not_openai(f"body is not JSON: {raw[:80]!r}") from None
        if not isinstance(data, dict):
            raise _not_openai("body is not a JSON object")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or "message" not in choices[0]:
            raise _not_openai("no choices[0].message in the response")
        return data

    async def stream(self, messages: list[dict[str, Any]], **options: Any) -> StreamResult:
        """A streamed completion, timing the first content token and counting tokens."""
        payload = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            **options,
        }
        start = time.perf_counter()
        first: float | None = None
        chunks, parts, usage_tokens, done = 0, [], None, False
        try:
            async with self._session.post(
                self._url, json=payload, headers=self._headers, timeout=self._timeout
            ) as response:
                if response.status != 200:
                    self._check_status(response.status, await response.read())
                async for line in response.content:
                    if not line.startswith(b"data:"):
                        if line.strip():
                            raise _not_openai(f"unexpected stream line {line[:60]!r}")
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done = True
                        break
                    event = self._event(data)
                    if isinstance(event.get("usage"), dict):
                        usage_tokens = event["usage"].get("completion_tokens")
                    for choice in event.get("choices") or []:
                        delta = choice.get("delta") or {}
                        content = delta.get("content")
                        if content:
                            first = first if first is not None else time.perf_counter()
                            parts.append(content)
                            chunks += 1
        except (aiohttp.ClientError, TimeoutError) as error:
            raise self._translate(error) from None
        end = time.perf_counter()
        if not done:
            raise _not_openai("the stream ended without `data: [DONE]`")
        if first is None:
            raise _not_openai("the stream carried no content")
        tokens = usage_tokens if isinstance(usage_tokens, int) and usage_tokens > 0 else chunks
        return StreamResult(first - start, end - start, tokens, "".join(parts))

    @staticmethod
    def _event(data: bytes) -> dict[str, Any]:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise _not_openai(f"stream event is not JSON: {data[:60]!r}") from None
        if not isinstance(event, dict) or not isinstance(event.get("choices", []), list):
            raise _not_openai("stream event without a choices list")
        return event

    @staticmethod
    def _check_status(status: int, raw: bytes) -> None:
        if status == 200:
            return
        message = raw[:200].decode(errors="replace")
        try:
            error = orjson.loads(raw).get("error")
            if isinstance(error, dict) and error.get("message"):
                message = str(error["message"])
        except (orjson.JSONDecodeError, AttributeError):
            pass
        hint = " (check the API key)" if status in (401, 403) else ""
        raise BackendError(f"HTTP {status}{hint}: {message}")

    def _translate(self, error: BaseException) -> BackendError:
        if isinstance(error, TimeoutError):
            return BackendError(f"timed out after {self._timeout_s:g} s")
        if isinstance(error, aiohttp.ClientConnectorError):
            return BackendError(f"unreachable: cannot connect to {self._url} ({error.os_error})")
        if isinstance(error, aiohttp.ContentTypeError | aiohttp.ClientPayloadError):
            return _not_openai(str(error))
        return BackendError(f"request failed: {type(error).__name__}: {error}")
