"""Writing the client-facing model name back into responses.

A canary rewrite sends `chat` to `chat-v2`; the client must still see `chat`. JSON
bodies are rewritten whole; SSE streams line by line, buffering only a partial line,
so chunks still flow through as they come.
"""

from __future__ import annotations

import orjson

__all__ = ["ModelNameRewriter"]


class ModelNameRewriter:
    def __init__(self, client_model: str) -> None:
        self.client_model = client_model
        self._partial = b""

    def _line(self, line: bytes) -> bytes:
        if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
            return line
        payload = line[5:].strip()
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return line
        if isinstance(event, dict) and "model" in event:
            event["model"] = self.client_model
            return b"data: " + orjson.dumps(event)
        return line

    def stream_chunk(self, chunk: bytes) -> bytes:
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if not lines:
            return b""
        return b"\n".join(self._line(line) for line in lines) + b"\n"

    def flush(self) -> bytes:
        rest, self._partial = self._partial, b""
        return self._line(rest) if rest else b""

    def json_body(self, body: bytes) -> bytes:
        try:
            event = orjson.loads(body)
        except orjson.JSONDecodeError:
            return body
        if isinstance(event, dict) and "model" in event:
            event["model"] = self.client_model
            return orjson.dumps(event)
        return body
