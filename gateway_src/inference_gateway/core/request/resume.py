"""Resume on break: a streamed answer whose model server fails after it started goes on
from another pod (tier 1) or cluster (tier 2), spliced into the same client stream
(docs/migration.md).

One home for the rule, used by any data plane that relays a stream (`igw serve`: pods,
`igw global`: clusters; each says only where a continuation goes, `open_next`):

* `unresumable(body, chat)`: which requests cannot be continued faithfully; they keep
  today's end (the relay's SSE error event):
  `n` > 1 or `best_of` > 1 (one continuation is one choice), `logprobs` / `top_logprobs`
  / `prompt_logprobs` (the delivered tokens' log-probabilities cannot be re-given),
  `echo` and `suffix` (completions that frame the answer), `response_format` other than
  text and structured-output fields (the grammar would restart at the splice), a `seed`
  with a temperature other than 0 (vLLM seeds its sampler per request: at offset `k` it
  draws other numbers than the unbroken request), a prompt of token ids, an answer that
  does not stream. At break time (`Delivered.blocker`) also: a tool call or reasoning
  text already sent (half a call cannot be re-opened), a `finish_reason` already sent, a
  break inside an SSE event (the client holds half an event).
* `Delivered`: what the client has so far (its text, the completion tokens, the
  response `id`, `model`, `created`, whether the role delta was sent), read from the
  bytes relayed (kept as they pass and read in 64 KiB at a time, so a stream is held as
  its text, not its SSE framing).
* `continuation(body, delivered, chat)`: the request that continues the answer, as
  vLLM's OpenAI server continues one: chat: the messages plus an assistant message with
  the text so far, `continue_final_message: true`, `add_generation_prompt: false`;
  completions: the prompt plus the text so far; `max_tokens` / `max_completion_tokens`
  (and `min_tokens`) less the tokens delivered; every sampling parameter as sent. A
  P/D decode leg's `kv_transfer_params` are dropped: its prefill pod freed the prompt's
  blocks once the decode pod read them, and vLLM's NixlConnector only logs a second
  read of freed blocks (`_get_new_notifs`: "Potentially invalid KV blocks for
  unrecognized request"), whatever they hold by then. A continuation is a whole request,
  prefilled where it lands (docs/migration.md, "P/D").
* `Splicer`: rewrites the continuation's events into the client's stream: the first
  stream's `id`, `model` and `created`, no second role delta, and a `usage` with the
  prompt counted once (the continuation's prompt less the tokens it re-reads) and every
  completion token delivered (before the break and after).
* `Resumer.stream`: the one seam. It wraps the first upstream's chunks; when they break
  (the source raises, no chunk for `idle_timeout_s`, or the model server's SSE error
  event) and the request may be resumed, it asks the data plane's `open_next` for the
  continuation on the next pod or cluster (at most `max_resumes` times, each within
  `deadline_s` of the break) and goes on with it; otherwise it raises what broke, and the
  relay ends the stream as before. A pod that broke before any byte of its answer was
  relayed (it sent its headers and died in the prefill) is not resumed but asked again:
  the next pod gets the request whole (`retried`; a P/D decode leg without its
  `kv_transfer_params`), unless it went silent (a stall before the first byte: it may
  be generating). Token budgets count the chunks as they are relayed and settle from the
  spliced `usage`, so they are charged once.

Tokens delivered are counted one per content event: vLLM's default `--stream-interval`
of 1 (a pod streaming several tokens an event under-counts them, and the continuation's
`max_tokens` is then larger than what is left: the answer may run longer, never shorter).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
)
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from inference_gateway.core.request.pd_body import KV_TRANSFER_PARAMS, without_client_params
from inference_gateway.errors import UpstreamError, UpstreamTimeout

__all__ = [
    "BreakReason",
    "Continuation",
    "Delivered",
    "Resumer",
    "Splicer",
    "StreamBreak",
    "continuation",
    "unresumable",
]

# a stream longer than this is not kept for a resume (nor resumed)
MAX_KEPT_BYTES = 64 * 2**20
FOLD_BYTES = 64 * 2**10  # relayed bytes kept before they are read into text
_ERROR_MARK = b'"error"'  # in every error event (vLLM's, OpenAI's); parsed only then
_STRUCTURED = (
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "structured_outputs",
)


class BreakReason:
    """The `reason` label of `igw_request_migrations_total`."""

    CONNECTION = "connection"  # reset, closed without the end, any read error
    STALL = "stall"  # no chunk for the stream idle timeout
    ERROR_EVENT = "error_event"  # the model server's SSE error event


class StreamBreak(UpstreamError):
    """The upstream's stream ended before its answer did (its SSE error event): an
    answer that broke, in the one error tree of outbound calls."""


class Continuation(Protocol):
    """An opened continuation: its chunks, and `release` (closes its connection)."""

    def chunks(self) -> AsyncIterator[bytes]: ...

    def release(self) -> None: ...


def unresumable(body: Mapping[str, Any], chat: bool) -> str | None:
    """Why this request cannot be resumed faithfully (None: it can)."""
    if body.get("stream") is not True:
        return "not streamed"
    for name in ("n", "best_of"):
        value = body.get(name)
        if value is not None and value != 1:
            return f"{name} > 1"
    for name in ("logprobs", "top_logprobs", "prompt_logprobs", "echo", "suffix"):
        if body.get(name) not in (None, False, 0, ""):
            return name
    response_format = body.get("response_format")
    if response_format is not None and (
        not isinstance(response_format, dict) or response_format.get("type") != "text"
    ):
        return "response_format"
    if any(body.get(name) is not None for name in _STRUCTURED):
        return "structured output"
    if body.get("seed") is not None and body.get("temperature", 1.0) != 0:
        return "seed at an offset"
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages"
        if body.get("continue_final_message") is True and not _continuable(messages[-1]):
            return "final message"
    elif _prompt_text(body.get("prompt")) is None:
        return "prompt not text"
    return None


def _continuable(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and message.get("role") == "assistant"
        and isinstance(message.get("content"), str)
    )


def _prompt_text(prompt: Any) -> str | None:
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return prompt if isinstance(prompt, str) else None


@dataclass(slots=True)
class Delivered:
    """What the client got of the answer (the module docstring)."""

    id: str | None = None
    model: str | None = None
    created: int | None = None
    role_sent: bool = False
    tokens: int = 0
    blocker: str | None = None  # why it cannot be continued from here
    parts: list[str] = field(default_factory=list)  # the text, piece by piece

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @classmethod
    def read(cls, data: bytes, chat: bool) -> Delivered:
        """Parse the relayed bytes (whole SSE events, as they came)."""
        out = cls()
        if out.feed(data, chat).strip():
            out.blocker = "broke inside an event"
        return out

    def feed(self, data: bytes, chat: bool) -> bytes:
        """Read the whole events of `data` into this; the partial last event back."""
        events = data.split(b"\n\n")
        for raw in events[:-1]:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.blocker = "ended"
                continue
            try:
                event = orjson.loads(payload)
            except orjson.JSONDecodeError:
                self.blocker = "unreadable event"
                continue
            if not isinstance(event, dict):
                continue
            self.id = self.id or event.get("id")
            self.model = self.model or event.get("model")
            self.created = self.created or event.get("created")
            for choice in event.get("choices") or ():
                if not isinstance(choice, dict):
                    continue
                if choice.get("finish_reason") is not None:
                    self.blocker = "finished"
                piece = self._piece(choice, chat)
                if piece:
                    self.parts.append(piece)
                    self.tokens += 1
        return events[-1]

    def _piece(self, choice: dict[str, Any], chat: bool) -> str | None:
        if not chat:
            text = choice.get("text")
            return text if isinstance(text, str) else None
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return None
        if delta.get("role"):
            self.role_sent = True
        if delta.get("tool_calls"):
            self.blocker = "tool call sent"
        if delta.get("reasoning_content") or delta.get("reasoning"):
            self.blocker = "reasoning sent"
        content = delta.get("content")
        return content if isinstance(content, str) else None


_BOUNDS = ("max_tokens", "max_completion_tokens")


def continuation(body: dict[str, Any], delivered: Delivered, chat: bool) -> dict[str, Any] | None:
    """The body that continues the answer (None: nothing is left to generate)."""
    out = {k: v for k, v in body.items() if k != KV_TRANSFER_PARAMS}  # stale: module docstring
    for name in _BOUNDS:
        bound = body.get(name)
        if isinstance(bound, int) and not isinstance(bound, bool):
            if bound - delivered.tokens < 1:
                return None
            out[name] = bound - delivered.tokens
    least = body.get("min_tokens")
    if isinstance(least, int) and not isinstance(least, bool):
        out["min_tokens"] = max(0, least - delivered.tokens)
    if chat:
        messages = list(body["messages"])
        if body.get("continue_final_message") is True:
            last = dict(messages[-1])
            last["content"] = last["content"] + delivered.text
            messages[-1] = last
        else:
            messages.append({"role": "assistant", "content": delivered.text})
        out["messages"] = messages
        out["continue_final_message"] = True
        out["add_generation_prompt"] = False
    else:
        prompt = _prompt_text(body.get("prompt"))
        assert prompt is not None  # unresumable() said so
        out["prompt"] = prompt + delivered.text
    return out


class Splicer:
    """Rewrites a continuation's SSE events into the first stream's (module docstring);
    holds only a partial event."""

    def __init__(self, delivered: Delivered, chat: bool) -> None:
        self.delivered = delivered
        self.chat = chat
        self._partial = b""

    def edit(self, chunk: bytes) -> bytes:
        data = self._partial + chunk
        cut = data.rfind(b"\n\n") + 2 if b"\n\n" in data else 0
        self._partial = data[cut:]
        out = [self._event(raw) for raw in data[:cut].split(b"\n\n")[:-1]]
        return b"".join(out)

    def _event(self, raw: bytes) -> bytes:
        line = raw.strip()
        if not line.startswith(b"data:"):
            return raw + b"\n\n" if line else b""
        payload = line[5:].strip()
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return raw + b"\n\n"  # [DONE], or what the relay passes as it came
        if not isinstance(event, dict) or "choices" not in event:
            return raw + b"\n\n"
        delivered = self.delivered
        for key in ("id", "model", "created"):
            value = getattr(delivered, key)
            if value is not None:
                event[key] = value
        choices = event.get("choices") or []
        if self.chat and delivered.role_sent:
            kept = []
            for choice in choices:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if (
                    isinstance(delta, dict)
                    and delta.pop("role", None) is not None
                    and not delta.get("content")
                    and choice.get("finish_reason") is None
                ):
                    continue  # the role delta the client already had
                kept.append(choice)
            if choices and not kept and not event.get("usage"):
                return b""
            event["choices"] = kept
        usage = event.get("usage")
        if isinstance(usage, dict):
            event["usage"] = self._usage(usage)
        return b"data: " + orjson.dumps(event) + b"\n\n"

    def _usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        """The prompt once, and every completion token (the continuation's prompt re-read
        the delivered text, as prompt tokens)."""
        done = self.delivered.tokens
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if not isinstance(prompt, int) or not isinstance(completion, int):
            return usage
        out = dict(usage)
        out["prompt_tokens"] = max(0, prompt - done)
        out["completion_tokens"] = completion + done
        out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
        return out


# what the data plane reports per migration: (reason, outcome, gap_s or None)
Report = Callable[[str, str, float | None], None]
# the data plane opens the continuation on the next pod (None: no pod took it)
OpenNext = Callable[[bytes, str], Awaitable[Continuation | None]]


@dataclass(slots=True)
class Resumer:
    """One request's resume state (module docstring). `body`: the bytes sent to the pod
    (read only when the stream breaks)."""

    body: bytes
    chat: bool
    open_next: OpenNext
    report: Report
    idle_timeout_s: float | None = None
    max_resumes: int = 2
    deadline_s: float = 30.0
    _delivered: Delivered = field(default_factory=Delivered, init=False)  # read so far
    _kept: list[bytes] = field(default_factory=list, init=False)  # relayed, not read yet
    _unread: int = field(default=0, init=False)
    _size: int = field(default=0, init=False)
    _opened: list[Continuation] = field(default_factory=list, init=False)

    async def stream(self, first: AsyncIterable[bytes]) -> AsyncGenerator[bytes, None]:
        """The client's chunks: the first upstream's, then each continuation's, spliced.
        A silence past `idle_timeout_s` while waiting on the upstream is a stall, and the
        model server's SSE error event a break (what precedes it in its chunk passes)."""
        loop = asyncio.get_running_loop()
        idle = _IdleWatch(loop, self.idle_timeout_s) if self.idle_timeout_s else None
        chunks = aiter(first)
        splicer: Splicer | None = None
        resumes = 0
        gap_from: float | None = None  # the last chunk before the break
        last_at = loop.time()
        reason = BreakReason.CONNECTION
        try:
            while True:
                try:
                    last_at = loop.time()  # the last chunk was handed on by now
                    if idle is not None:
                        idle.since = last_at
                    try:
                        chunk = await anext(chunks)
                    except StopAsyncIteration:
                        return
                    except asyncio.CancelledError:
                        if idle is not None and idle.expired():
                            raise TimeoutError("the stream went silent") from None
                        raise
                    finally:
                        if idle is not None:
                            idle.since = None
                    broke = None
                    if _ERROR_MARK in chunk:
                        at = _error_event_start(chunk)
                        if at is not None:
                            chunk, broke = chunk[:at], StreamBreak("the pod sent an error event")
                    out = splicer.edit(chunk) if splicer is not None else chunk
                    if out:
                        if gap_from is not None:
                            self.report(reason, "resumed", loop.time() - gap_from)
                            gap_from = None
                        self._keep(out)
                        yield out
                    if broke is not None:
                        raise broke
                except Exception as error:
                    reason = _reason(error)
                    if not self._size:
                        if reason == BreakReason.STALL or resumes >= self.max_resumes:
                            raise  # silent before its first byte: it may be generating
                        resumes += 1
                        source = await self._open(self._whole(), reason)
                        self.report(reason, "retried" if source else "failed", None)
                        if source is None:
                            raise
                        chunks = source
                        continue
                    delivered = self._read()
                    body = self._continuation(delivered)
                    if body is None or resumes >= self.max_resumes:
                        outcome = "exhausted" if body is not None else "not_resumable"
                        self.report(reason, outcome, None)
                        raise
                    resumes += 1
                    source = await self._open(orjson.dumps(body), reason)
                    if source is None:
                        self.report(reason, "failed", None)
                        raise
                    chunks, gap_from = source, last_at
                    # as of the break: the splicer's counts must not grow with the rest
                    splicer = Splicer(dataclasses.replace(delivered, parts=[]), self.chat)
        finally:
            if idle is not None:
                idle.close()
            for opened in self._opened:
                opened.release()

    def _read(self) -> Delivered:
        """What the client has so far (its text read in, the relayed bytes let go)."""
        delivered = self._delivered
        if delivered.feed(b"".join(self._kept), self.chat).strip():
            delivered.blocker = "broke inside an event"
        self._kept, self._unread = [], 0
        if self._size > MAX_KEPT_BYTES:
            delivered.blocker = "too long"
        return delivered

    def _continuation(self, delivered: Delivered) -> dict[str, Any] | None:
        if delivered.blocker is not None:
            return None
        try:
            body = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(body, dict) or unresumable(body, self.chat) is not None:
            return None
        return continuation(body, delivered, self.chat)

    def _whole(self) -> bytes:
        """The request as sent, for a pod that broke before any byte of it was relayed:
        sent again whole, without a P/D decode leg's `kv_transfer_params` (the broken pod
        may have read the prompt's blocks, `continuation`)."""
        return without_client_params(self.body)

    async def _open(self, body: bytes, reason: str) -> AsyncIterator[bytes] | None:
        """`body` on the next pod or cluster within the deadline: its chunks (released
        when the stream ends), or None when none took it."""
        try:
            async with asyncio.timeout(self.deadline_s):
                opened = await self.open_next(body, reason)
        except TimeoutError:
            return None
        if opened is None:
            return None
        self._opened.append(opened)
        return aiter(opened.chunks())

    def _keep(self, chunk: bytes) -> None:
        """Keep a relayed chunk; past `FOLD_BYTES` unread, read the whole events in (a
        stream is kept as its text, not its SSE framing)."""
        self._size += len(chunk)
        if self._size > MAX_KEPT_BYTES:
            return
        self._kept.append(chunk)
        self._unread += len(chunk)
        if self._unread > FOLD_BYTES:
            tail = self._delivered.feed(b"".join(self._kept), self.chat)
            self._kept, self._unread = [tail], len(tail)


class _IdleWatch:
    """The stream idle timeout as one timer per stream, re-armed only when it fires: a
    timeout per chunk costs every chunk a timer of its own (~5 µs, more than the relay).
    `since`: when the stream began to wait on its upstream (None: not waiting, say while
    the client is written to, which the watch never interrupts)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, idle_s: float) -> None:
        self.loop = loop
        self.idle_s = idle_s
        self.task = asyncio.current_task()
        self.since: float | None = None
        self.fired = False
        self.handle = loop.call_at(loop.time() + idle_s, self._check)

    def _check(self) -> None:
        now, since = self.loop.time(), self.since
        if since is not None and now - since >= self.idle_s and self.task is not None:
            self.fired = True
            self.task.cancel()  # the waiting `anext` raises; `expired` says it was this
            since = None
        self.handle = self.loop.call_at((since or now) + self.idle_s, self._check)

    def expired(self) -> bool:
        """Whether the cancellation being handled was the watch's (then it is taken back;
        a cancellation of the request's own still stands)."""
        if not self.fired or self.task is None:
            return False
        self.fired = False
        return self.task.uncancel() == 0

    def close(self) -> None:
        self.handle.cancel()


def _error_event_start(chunk: bytes) -> int | None:
    """Where the error event starts in `chunk` (None: a marker inside other text)."""
    at = 0
    for raw in chunk.split(b"\n\n"):
        line = raw.strip()
        if line.startswith(b"data:"):
            try:
                event = orjson.loads(line[5:].strip())
            except orjson.JSONDecodeError:
                event = None
            if isinstance(event, dict) and ("error" in event or event.get("object") == "error"):
                return at
        at += len(raw) + 2
    return None


def _reason(error: BaseException) -> str:
    if isinstance(error, StreamBreak):
        return BreakReason.ERROR_EVENT
    if isinstance(error, (TimeoutError, UpstreamTimeout)):
        return BreakReason.STALL
    return BreakReason.CONNECTION
