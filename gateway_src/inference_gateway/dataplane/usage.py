"""Reading `usage` out of a model server's answer as it passes through, without holding
streams: both data planes count output tokens and settle token-rate charges from it."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["UsageScanner"]


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
                if b'"usage"' in line and line.startswith(b"data:"):
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
        if isinstance(event, dict) and isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
