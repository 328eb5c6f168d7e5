"""Edits of a model server's answer on its way to the client.

* `ModelNameRewriter`: a canary rewrite sends `chat` to `chat-v2`; the client must still
  see `chat`. JSON bodies are rewritten whole; SSE streams line by line, buffering only
  a partial line, so chunks still flow through as they come.
* Stream usage: a token limit settles a stream's charge from the engine's `usage`, and
  an engine reports it only when asked (`stream_options.include_usage`, which the
  openai SDK does not set by default), so a gateway that counts one token per event
  under-charges every engine that streams several tokens an event (vLLM's
  `--stream-interval`, speculative decoding). `ask_for_usage` asks for it on a stream
  whose client did not, and `UsageEventFilter` takes the usage-only event (vLLM's last
  event before `[DONE]`: `"choices": []` and a `usage` object) out of that stream, so the
  client gets the stream it asked for and the gateway the count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import orjson

__all__ = ["ModelNameRewriter", "StreamEdit", "UsageEventFilter", "ask_for_usage", "chained"]

_ASK = b'"stream_options":{"include_usage":true},'
_EMPTY_CHOICES = (b'"choices":[]', b'"choices": []')


class StreamEdit(Protocol):
    def stream_chunk(self, chunk: bytes) -> bytes: ...

    def flush(self) -> bytes: ...


def ask_for_usage(raw: bytes, body: Mapping[str, Any]) -> bytes | None:
    """`raw` asking the engine for the stream's `usage`, or None when it already does
    (or does not stream, or its `stream_options` is not an object: the engine answers
    that 400 itself). `body` is `raw` parsed (a JSON object with a `model`)."""
    if body.get("stream") is not True:
        return None
    options = body.get("stream_options")
    if "stream_options" not in body:  # the common case: no parse, one splice after `{`
        at = raw.index(b"{") + 1
        return raw[:at] + _ASK + raw[at:]
    if options is not None and not isinstance(options, dict):
        return None
    if isinstance(options, dict) and options.get("include_usage") is True:
        return None
    return orjson.dumps({**body, "stream_options": {**(options or {}), "include_usage": True}})


class UsageEventFilter:
    """Drops the usage-only events of an SSE stream (module docstring), handing each to
    `on_usage` as its `data:` line; every other byte passes as it came. Only a partial
    last line is held (a usage event may be split across chunks)."""

    def __init__(self, on_usage: Callable[[bytes], None] | None = None) -> None:
        self.on_usage = on_usage
        self._partial = b""
        self._blank_next = False  # the blank line that ended a dropped event follows

    def stream_chunk(self, chunk: bytes) -> bytes:
        if (
            not self._partial
            and not self._blank_next
            and chunk.endswith(b"\n")
            and not any(marker in chunk for marker in _EMPTY_CHOICES)
        ):
            return chunk  # the common case: nothing to look at
        data = self._partial + chunk
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        return self._lines(data[:cut])

    def flush(self) -> bytes:
        rest, self._partial = self._partial, b""
        return self._lines(rest)

    def _lines(self, data: bytes) -> bytes:
        out = []
        for line in data.splitlines(keepends=True):
            if self._blank_next and line.strip() == b"":
                self._blank_next = False
                continue
            self._blank_next = False
            if (
                line.startswith(b"data:")
                and any(m in line for m in _EMPTY_CHOICES)
                and _usage_only(line[5:])
            ):
                if self.on_usage is not None:
                    self.on_usage(line)
                self._blank_next = True
                continue
            out.append(line)
        return b"".join(out)


def _usage_only(payload: bytes) -> bool:
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    return (
        isinstance(event, dict)
        and event.get("choices") == []
        and isinstance(event.get("usage"), dict)
    )


def chained(
    *edits: StreamEdit | None,
) -> tuple[Callable[[bytes], bytes] | None, Callable[[], bytes] | None]:
    """One `transform` / `flush` pair (the relay's) applying `edits` in order."""
    present = [e for e in edits if e is not None]
    if not present:
        return None, None
    if len(present) == 1:
        return present[0].stream_chunk, present[0].flush

    def transform(chunk: bytes) -> bytes:
        for edit in present:
            chunk = edit.stream_chunk(chunk)
        return chunk

    def flush() -> bytes:
        tail = b""
        for edit in present:
            tail = edit.stream_chunk(tail) + edit.flush() if tail else edit.flush()
        return tail

    return transform, flush


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
