"""One emulated vLLM pod over HTTP: the OpenAI endpoints, `/v1/models`, `/health`, `/metrics`.

Shapes follow vLLM's OpenAI server where a client or router can see them:

* `POST /v1/chat/completions` and `/v1/completions`, streaming (SSE `data: {...}` chunks,
  one per token, the first chat chunk carrying the role, `finish_reason` on the last
  token's chunk, a `usage` chunk when `stream_options.include_usage` is true, then
  `data: [DONE]`) and non-streaming JSON with `usage`;
* LoRA adapters are addressed by model name; an unknown model is a 404 and malformed
  input a 400, both as `{"error": {"message", "type", "param", "code"}}` as vLLM sends;
  a request without `model` uses the base model, as vLLM does;
* `GET /v1/models` lists the base model and each adapter with `parent` set to the base.

Token counts and output text come from `tokens.py`; prefix-cache blocks are hashed from
token ids as vLLM hashes them (`protocols.vllm.block_hashing`: `hash_algo` is vLLM's
`--prefix-caching-hash-algo`, the seed is `PYTHONHASHSEED` unless the pod is given
`hash_seed`, an adapter's blocks carry its int id, numbered 1, 2, … in the order the
adapters are listed as vLLM numbers `--lora-modules`, and a request's `cache_salt`
salts its first block), and with `kv_events` the pod publishes vLLM's KV events
(`kv_publisher`). Given `tokenizer` (vLLM's `--tokenizer`: a directory with a model's
tokenizer files) the pod counts and hashes that tokenizer's ids of the request, as a
real pod of that model does (`protocols.vllm.hf_tokenizer`); without one, the emulator's
4-bytes-per-token rule. One deliberate simplification: `n` must be
1. A client that disconnects aborts its request, as vLLM does (its OpenAI server aborts
the engine request when the connection closes, streaming or not): the engine drops it at
once, so its KV blocks and batch slot free, the running count falls, and it is counted
with `finished_reason="abort"`. A stream notices at its next write, within one engine
step; a plain request through aiohttp's handler cancellation.

With vLLM's `--kv-transfer-config` (NixlConnector) a request's `kv_transfer_params` make
it the prefill or the decode leg of disaggregated serving (`kvtransfer.py`, `disagg.py`).

With a `Tracing` (vLLM's `--otlp-traces-endpoint`) each completion is one SERVER span
named `llm_request` under the request's `traceparent`, with the attributes vLLM's
(vllm/tracing.py `SpanAttributes`, output_processor.py `do_tracing`) gives it:
`gen_ai.request.id`, `gen_ai.response.model`, `gen_ai.usage.prompt_tokens`,
`gen_ai.usage.completion_tokens`, `gen_ai.request.max_tokens`,
`gen_ai.latency.time_to_first_token` and `gen_ai.latency.e2e`.

A chat request with `continue_final_message: true` (and `add_generation_prompt` not
true: both is vLLM's 400) continues its last message, and a completions prompt ending in
the emulator's filler continues it (tokens.py `output_start`): an answer cut after `k`
tokens and asked again with its text so far gives, at temperature 0, the unbroken text.
`PodBehavior.stream_error_after_tokens` makes every stream end after that many tokens
with vLLM's mid-stream error event and `[DONE]` (fault injection).

A stopped pod (`EmulatedPod.stop`) aborts its open connections, so clients see what a
crashed pod gives them: a stream cut without `[DONE]`, or a reset connection.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Hashable, Sequence
from typing import Any

import orjson
from aiohttp import web

from inference_gateway.emulator.behaviors import Jitter, PodBehavior, ToolCall, decide_tool_call
from inference_gateway.emulator.disagg import Disaggregation
from inference_gateway.emulator.engine import EngineRequest
from inference_gateway.emulator.kv_publisher import KVEventsConfig, ZmqKVPublisher
from inference_gateway.emulator.kvtransfer import (
    READ_PATH,
    KVTransferConfig,
    RemotePrefill,
    remote_prefill_of,
    wants_remote_decode,
)
from inference_gateway.emulator.metrics_text import PodMetrics
from inference_gateway.emulator.profiles import BLOCK_SIZE, PodProfile
from inference_gateway.emulator.realtime import PodStoppedError, RealtimeDriver
from inference_gateway.emulator.tokens import (
    count_tokens,
    default_output_tokens,
    filler_text,
    filler_tokens,
    output_start,
    render_chat,
)
from inference_gateway.protocols.vllm.block_hashing import (
    block_hashes,
    hash_function,
    none_hash,
    seed_from_env,
    to_external,
)
from inference_gateway.protocols.vllm.hf_tokenizer import HFTokenizer
from inference_gateway.protocols.vllm.prompt_tokens import template_flags, text_ids
from inference_gateway.telemetry.tracing import SpanKind, Tracing
from inference_gateway.transport.listen import binding

__all__ = ["EmulatedPod", "PodApp"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 32 * 2**20  # a 128k-token prompt is ~512 KiB; leave room
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
# what vLLM's OpenAI server streams when the engine fails mid-answer (serving_chat.py
# `create_streaming_error_response`), before its `[DONE]`
STREAM_ERROR = (
    b'data: {"error": {"message": "EngineCore encountered an issue.", '
    b'"type": "InternalServerError", "param": null, "code": 500}}\n\n'
)


class _BadRequest(Exception):
    """Raised while parsing a request; becomes an OpenAI-shaped error response."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


def _error(status: int, message: str, kind: str) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def _json(data: Any) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")


def _abort(request: web.Request) -> None:
    """Drop the connection as a crashed server would (no clean end of the response)."""
    if request.transport is not None:
        request.transport.abort()


class PodApp:
    """The HTTP handlers of one pod run; a restarted pod gets a fresh one (empty cache)."""

    def __init__(
        self,
        profile: PodProfile,
        *,
        served_model_name: str,
        adapters: Sequence[str],
        behavior: PodBehavior | None = None,
        kv_events: KVEventsConfig | None = None,
        hash_seed: str | None = None,
        kv_transfer: KVTransferConfig | None = None,
        tokenizer: str | None = None,
        hash_algo: str = "sha256",
        max_model_len: int | None = None,
        prefix_caching: bool = True,
        auto_tool_choice: bool = True,
        tracing: Tracing | None = None,
    ) -> None:
        self.tracing = tracing or Tracing.off()
        if adapters and not profile.max_loras:
            raise ValueError("adapters need LoRA slots: build the profile with max_loras >= 1")
        self.profile = profile
        self.served_model_name = served_model_name
        self.adapters = tuple(adapters)
        self.behavior = behavior or PodBehavior()  # tool calls, imperfections: behaviors.py
        self.auto_tool_choice = auto_tool_choice  # vLLM's --enable-auto-tool-choice
        self.jitter = Jitter(self.behavior)
        self.created = int(time.time())
        # vLLM refuses to start when one max-length sequence cannot fit in the KV cache;
        # operators then lower --max-model-len. Capping it here does that for them, and
        # guarantees the engine can always fit a lone request (no deadlock). A given
        # `max_model_len` (vLLM's flag, checked by the caller as vLLM checks it) wins.
        self.max_model_len = max_model_len or min(
            profile.model.max_model_len, profile.kv_capacity_tokens
        )
        self.metrics = PodMetrics(
            model_name=served_model_name,
            snapshot=lambda: self.driver.engine.snapshot(),
            cache_info={
                "block_size": str(BLOCK_SIZE),
                "cache_dtype": "auto",
                "enable_prefix_caching": str(prefix_caching),
                "gpu_memory_utilization": str(profile.gpu_memory_utilization),
                "num_cpu_blocks": "0",
                "num_gpu_blocks": str(profile.num_gpu_blocks),
                "num_gpu_blocks_override": "None",
                "sliding_window": "None",
                "swap_space_bytes": "0",
            },
        )
        # vLLM: hash(PYTHONHASHSEED) when set, else random per process; unset here, "0"
        # (the scorer's default), so an emulated fleet agrees with a default picker
        seed = hash_seed if hash_seed is not None else seed_from_env() or "0"
        self._hash_fn = hash_function(hash_algo)
        self._hash_root = none_hash(seed, hash_algo)
        self.tokenizer = HFTokenizer(tokenizer) if tokenizer else None
        self.publisher: ZmqKVPublisher | None = None
        if kv_events is not None and kv_events.publishes:
            self.publisher = ZmqKVPublisher(
                kv_events, block_size=BLOCK_SIZE, capacity_blocks=profile.num_gpu_blocks
            )
        self.driver = RealtimeDriver(
            profile, observer=self.metrics, kv_sink=self.publisher, prefix_caching=prefix_caching
        )
        self._ids = itertools.count(1)
        # vLLM's --kv-transfer-config: prefill and decode legs of disaggregated serving
        self.disagg = Disaggregation(kv_transfer, profile, self.driver) if kv_transfer else None

    def close(self) -> None:
        """Stop the engine and the event publisher (a stopped pod's state is gone)."""
        self.driver.close()
        if self.publisher is not None:
            self.publisher.close()

    def _prompt_ids(self, body: dict[str, Any], text: str) -> list[int]:
        """The request's token ids: the model's tokenizer's, or the emulator's rule's."""
        if self.tokenizer is None:
            return text_ids(text)
        ids = self.tokenizer.prompt_ids(body)
        if not ids:
            raise _BadRequest(400, "the prompt cannot be tokenized (media parts, a template error)")
        return ids

    def _block_hashes(self, ids: list[int], adapter: str | None, body: dict[str, Any]) -> list[int]:
        """vLLM's block hashes of the prompt (an adapter's int id in every block's key)."""
        lora_id = self.adapters.index(adapter) + 1 if adapter else None
        salt = body.get("cache_salt")
        if salt is not None and (not isinstance(salt, str) or not salt):
            raise _BadRequest(400, "Parameter 'cache_salt' must be a non-empty string if provided.")
        hashed = block_hashes(
            ids,
            self._hash_root,
            block_size=BLOCK_SIZE,
            lora_id=lora_id,
            cache_salt=salt,
            hash_fn=self._hash_fn,
        )
        hashes = [to_external(h) for h in hashed]
        if self.publisher is not None:
            self.publisher.register(hashes, ids, lora_id)
        return hashes

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics_handler)
        app.router.add_get("/metrics/", self.metrics_handler)
        if self.disagg is not None:
            app.router.add_post(READ_PATH, self.disagg.read)
        return app

    # ------------------------------------------------------------------ small endpoints

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics_handler(self, request: web.Request) -> web.Response:
        """vLLM's two routes: `/metrics`, the instrumentator's whole page, and `/metrics/`,
        prometheus_client's ASGI app, which serves only the samples named by `name[]`
        (`adapters.FILTERED_PATHS` says where upstream does this)."""
        self.driver.sync()
        names = request.query.getall("name[]", []) if request.path == "/metrics/" else []
        page = self.metrics.render(names)
        return web.Response(body=page, headers={"Content-Type": PROMETHEUS_TEXT})

    async def models(self, request: web.Request) -> web.Response:
        base = self.served_model_name

        def card(name: str, parent: str | None) -> dict[str, Any]:
            return {
                "id": name,
                "object": "model",
                "created": self.created,
                "owned_by": "vllm",
                "root": self.profile.model.description if parent is None else name,
                "parent": parent,
                "max_model_len": self.max_model_len,
            }

        data = [card(base, None), *(card(a, base) for a in self.adapters)]
        return _json({"object": "list", "data": data})

    # ------------------------------------------------------------------ completions

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=False)

    async def _complete(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        if not self.tracing.enabled:
            return await self._answer(request, chat=chat)
        span = self.tracing.start("llm_request", headers=request.headers, kind=SpanKind.SERVER)
        started = time.perf_counter()
        try:
            response = await self._answer(request, chat=chat, span=span)
            span.set_attribute("http.response.status_code", response.status)
            return response
        finally:
            span.set_attribute("gen_ai.latency.e2e", time.perf_counter() - started)
            span.end()

    async def _answer(
        self, request: web.Request, *, chat: bool, span: Any = None
    ) -> web.StreamResponse:
        try:
            body = await self._read_body(request)
            model, adapter = self._resolve_model(body.get("model"))
            text = self._prompt_text(body, chat=chat)
            if chat:
                self._check_tool_choice(body)
            ids = self._prompt_ids(body, text)
            stream, include_usage, max_tokens = self._options(body, chat=chat)
            remote, keep_for_decode = self._disagg_leg(body)
            hashes = self._block_hashes(ids, adapter, body)
        except _BadRequest as error:
            return _error(error.status, str(error), error.kind)
        prompt_tokens = count_tokens(text) if self.tokenizer is None else len(ids)
        limit = self.max_model_len
        if prompt_tokens >= limit or (max_tokens and prompt_tokens + max_tokens > limit):
            return _error(
                400,
                f"This model's maximum context length is {limit} tokens. However, you "
                f"requested {prompt_tokens + (max_tokens or 0)} tokens "
                f"({prompt_tokens} in the messages, {max_tokens or 0} in the completion).",
                "BadRequestError",
            )
        start = output_start(
            text, body["messages"] if chat else None, continued=self._continued(body, chat)
        )
        decision = decide_tool_call(body, text, self.behavior) if chat and not stream else None
        tool_call = decision.call if decision else None
        if tool_call is not None:
            output_tokens = min(count_tokens(tool_call.arguments), max_tokens or limit)
        else:
            left = max(1, default_output_tokens(start.length_seed) - start.done)
            output_tokens = max_tokens or min(left, limit - prompt_tokens)
        pinned: Sequence[Hashable] = ()
        if remote is not None and self.disagg is not None:  # a decode leg: read the KV first
            async with self.disagg.session() as session:
                pinned = await self.disagg.pull(remote, hashes, session)
        engine_request = EngineRequest(
            request_id=next(self._ids),
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            block_hashes=hashes,
            adapter=adapter,
        )
        reply = _Reply(
            chat=chat,
            model=model,
            seed=self.jitter.output_seed(start.seed, body.get("temperature")),
            request=engine_request,
            finish_reason="tool_calls" if tool_call else "length" if max_tokens else "stop",
            tool_call=tool_call,
        )
        if span is not None and span.is_recording():
            span.set_attributes(
                {
                    "gen_ai.request.id": reply.id,
                    "gen_ai.response.model": model,
                    "gen_ai.usage.prompt_tokens": prompt_tokens,
                    "gen_ai.usage.completion_tokens": output_tokens,
                    "gen_ai.request.max_tokens": max_tokens or 0,
                }
            )
        try:
            ticket = self.driver.submit(engine_request, finish_reason=reply.finish_reason)
        except PodStoppedError:
            if self.disagg is not None:
                self.disagg.unpin(pinned)
            return _error(503, "The server is shutting down.", "ServiceUnavailableError")
        try:
            if stream:
                return await self._stream(request, reply, include_usage)
            try:
                await ticket.done
            except PodStoppedError:
                _abort(request)
                return web.Response(status=503)
            except asyncio.CancelledError:  # the client left (aiohttp cancels the handler)
                self.driver.abort(engine_request)
                raise
            answer = reply.full_response()
            if keep_for_decode and self.disagg is not None and reply.finish_reason == "length":
                answer["kv_transfer_params"] = self.disagg.keep(reply.id, hashes)
            return _json(answer)
        finally:
            if self.disagg is not None:
                self.disagg.unpin(pinned)

    async def _stream(
        self, request: web.Request, reply: _Reply, include_usage: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        engine_request, driver = reply.request, self.driver
        interval = self.behavior.stream_interval  # vLLM's --stream-interval
        fail_at = self.behavior.stream_error_after_tokens or None  # fault injection
        sent = 0
        try:
            await response.prepare(request)
            while True:
                finished = engine_request.finish_time is not None
                ready = engine_request.generated(driver.engine.clock)
                upto = ready if finished else sent + (ready - sent) // interval * interval
                if fail_at is not None and not finished:
                    upto = min(upto, fail_at)
                if upto > sent:
                    await response.write(reply.token_chunks(sent, upto, interval))
                    sent = upto
                if finished:
                    break
                if sent == fail_at:  # vLLM's answer to an engine error mid-stream
                    driver.abort(engine_request)
                    await response.write(STREAM_ERROR + b"data: [DONE]\n\n")
                    await response.write_eof()
                    return response
                await driver.next_step()
            tail = reply.usage_chunk() if include_usage else b""
            await response.write(tail + b"data: [DONE]\n\n")
            await response.write_eof()
        except PodStoppedError:
            _abort(request)
        except ConnectionError:
            log.debug("client disconnected from stream %s: aborted", reply.id)
            driver.abort(engine_request)
        except asyncio.CancelledError:
            driver.abort(engine_request)
            raise
        return response

    # ------------------------------------------------------------------ parsing

    def _disagg_leg(self, body: dict[str, Any]) -> tuple[RemotePrefill | None, bool]:
        """(the decode leg's remote prefill, whether this is a prefill leg) from the body's
        `kv_transfer_params`; ignored, as by vLLM, on a pod without a KV connector."""
        params = body.get("kv_transfer_params")
        if self.disagg is None or params is None:
            return None, False
        try:
            remote = remote_prefill_of(params)
        except ValueError as error:
            raise _BadRequest(400, str(error)) from None
        config = self.disagg.config
        if remote is not None and not config.consumes:
            raise _BadRequest(400, f"a {config.kv_role} pod cannot take a remote prefill")
        keep = remote is None and wants_remote_decode(params)
        if keep and not config.produces:
            raise _BadRequest(400, f"a {config.kv_role} pod cannot prefill for a remote decode")
        return remote, keep

    async def _read_body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as error:
            raise _BadRequest(400, f"Invalid JSON in request body: {error}") from None
        if not isinstance(body, dict):
            raise _BadRequest(400, "Request body must be a JSON object")
        return body

    def _resolve_model(self, model: Any) -> tuple[str, str | None]:
        """(model name echoed back, adapter or None); unknown names are 404 as in vLLM."""
        if model is None:
            return self.served_model_name, None
        if not isinstance(model, str):
            raise _BadRequest(400, "'model' must be a string")
        if model == self.served_model_name:
            return model, None
        if model in self.adapters:
            return model, model
        raise _BadRequest(404, f"The model `{model}` does not exist.", "NotFoundError")

    def _check_tool_choice(self, body: dict[str, Any]) -> None:
        """vLLM answers 400 to an "auto" tool choice (the default when `tools` are given)
        unless started with --enable-auto-tool-choice and a parser (serving_chat.py)."""
        choice = body.get("tool_choice", "auto" if body.get("tools") else "none")
        if choice == "auto" and not self.auto_tool_choice:
            raise _BadRequest(
                400,
                '"auto" tool choice requires --enable-auto-tool-choice and '
                "--tool-call-parser to be set",
            )

    def _prompt_text(self, body: dict[str, Any], *, chat: bool) -> str:
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _BadRequest(400, "'messages' must be a non-empty list")
            try:
                return render_chat(messages, **template_flags(body))
            except ValueError as error:
                raise _BadRequest(400, f"Invalid 'messages': {error}") from None
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            return prompt
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            # Token ids: 4 bytes each, so the tokenization rule counts them back exactly.
            return "".join(f"{t % 10000:04d}" for t in prompt)
        raise _BadRequest(
            400, "'prompt' must be a string, a list of one string, or a list of token ids"
        )

    @staticmethod
    def _continued(body: dict[str, Any], chat: bool) -> bool:
        """A chat request continuing its last message (checked by `_prompt_text`)."""
        return chat and body.get("continue_final_message") is True

    def _options(self, body: dict[str, Any], *, chat: bool) -> tuple[bool, bool, int | None]:
        stream = body.get("stream") or False
        if not isinstance(stream, bool):
            raise _BadRequest(400, "'stream' must be a boolean")
        stream_options = body.get("stream_options") or {}
        if not isinstance(stream_options, dict):
            raise _BadRequest(400, "'stream_options' must be an object")
        include_usage = bool(stream_options.get("include_usage"))
        if body.get("n", 1) not in (1, None):
            raise _BadRequest(400, "the emulator supports only n = 1")
        max_tokens = body.get("max_completion_tokens") if chat else None
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            raise _BadRequest(400, "'max_tokens' must be a positive integer")
        return stream, include_usage, max_tokens


class _Reply:
    """Renders one request's OpenAI response objects; stream chunks from byte templates.

    Streams write one SSE event per token, so the per-token JSON is pre-split around the
    token text (filler words never need escaping) instead of serialised per token.
    """

    def __init__(
        self,
        *,
        chat: bool,
        model: str,
        seed: int,
        request: EngineRequest,
        finish_reason: str,
        tool_call: ToolCall | None = None,
    ) -> None:
        self.chat = chat
        self.tool_call = tool_call
        self.model = model
        self.seed = seed
        self.request = request
        self.finish_reason = finish_reason
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.object = "chat.completion.chunk" if chat else "text_completion"
        head = (
            b'data: {"id":"' + self.id.encode() + b'","object":"' + self.object.encode()
            + b'","created":' + str(self.created).encode()
            + b',"model":' + orjson.dumps(model) + b',"choices":[{"index":0,'
        )  # fmt: skip
        self._head = head + (b'"delta":{"content":"' if chat else b'"text":"')
        close = b'"}' if chat else b'"'
        self._tail = close + b',"logprobs":null,"finish_reason":null}]}\n\n'
        self._last_tail = (
            close + b',"logprobs":null,"finish_reason":"' + finish_reason.encode() + b'"}]}\n\n'
        )
        self._role = (
            head + b'"delta":{"role":"assistant","content":""},"logprobs":null,'
            b'"finish_reason":null}]}\n\n'
        )

    def token_chunks(self, start: int, stop: int, per_event: int = 1) -> bytes:
        """SSE events for output tokens `start` .. `stop − 1`, `per_event` tokens an event
        (the role chunk first)."""
        parts = [self._role] if self.chat and start == 0 else []
        last = self.request.output_tokens - 1
        tokens = filler_tokens(self.seed, start, stop)
        for i in range(0, len(tokens), per_event):
            group = tokens[i : i + per_event]
            end = start + i + len(group) - 1
            parts += (self._head, b"".join(group), self._last_tail if end == last else self._tail)
        return b"".join(parts)

    def usage(self) -> dict[str, Any]:
        r = self.request
        return {
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.output_tokens,
            "total_tokens": r.prompt_tokens + r.output_tokens,
            "prompt_tokens_details": {"cached_tokens": r.cached_tokens},
        }

    def usage_chunk(self) -> bytes:
        chunk = {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": self.usage(),
        }
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def full_response(self) -> dict[str, Any]:
        text = filler_text(self.seed, 0, self.request.output_tokens)
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": self.finish_reason}
        if self.chat and self.tool_call is not None:
            call = {
                "id": f"chatcmpl-tool-{uuid.uuid4().hex}",
                "type": "function",
                "function": {"name": self.tool_call.name, "arguments": self.tool_call.arguments},
            }
            choice["message"] = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif self.chat:
            choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
        else:
            choice["text"] = text
        return {
            "id": self.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(),
        }


class EmulatedPod:
    """One pod's lifecycle on a loopback (or any) address: `start()`, `stop()`, restart.

    `port=0` takes an ephemeral port on first start and keeps it across restarts, so an
    endpoints file stays valid while a fault test stops and starts the pod.
    """

    def __init__(
        self,
        name: str,
        profile: PodProfile,
        *,
        served_model_name: str | None = None,
        adapters: Sequence[str] = (),
        host: str = "127.0.0.1",
        port: int = 0,
        labels: dict[str, str] | None = None,
        behavior: PodBehavior | None = None,
        kv_events: KVEventsConfig | None = None,
        hash_seed: str | None = None,
        kv_transfer: KVTransferConfig | None = None,
        tokenizer: str | None = None,
        hash_algo: str = "sha256",
        max_model_len: int | None = None,
        prefix_caching: bool = True,
        auto_tool_choice: bool = True,
        tracing: Tracing | None = None,
    ) -> None:
        self.name = name
        self.tracing = tracing
        self.max_model_len = max_model_len
        self.prefix_caching = prefix_caching
        self.auto_tool_choice = auto_tool_choice
        self.kv_transfer = kv_transfer
        self.tokenizer = tokenizer
        self.hash_algo = hash_algo
        self.profile = profile
        self.behavior = behavior
        self.kv_events = kv_events
        self.hash_seed = hash_seed
        self.served_model_name = served_model_name or profile.model.name
        self.adapters = tuple(adapters)
        self.host = host
        self.port = port
        self.labels = dict(labels or {})
        self.pod_app: PodApp | None = None
        self._runner: web.AppRunner | None = None

    @property
    def running(self) -> bool:
        return self._runner is not None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        if self._runner is not None:
            return
        pod_app = PodApp(
            self.profile,
            served_model_name=self.served_model_name,
            adapters=self.adapters,
            behavior=self.behavior,
            kv_events=self.kv_events,
            hash_seed=self.hash_seed,
            kv_transfer=self.kv_transfer,
            tokenizer=self.tokenizer,
            hash_algo=self.hash_algo,
            max_model_len=self.max_model_len,
            prefix_caching=self.prefix_caching,
            auto_tool_choice=self.auto_tool_choice,
            tracing=self.tracing,
        )
        runner = web.AppRunner(
            pod_app.app(),
            access_log=None,
            handle_signals=False,
            shutdown_timeout=0.1,
            handler_cancellation=True,  # a client that leaves aborts its request (vLLM)
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        try:
            with binding(self.host, self.port):
                await site.start()
        except BaseException:
            pod_app.close()
            await runner.cleanup()
            raise
        if self.port == 0:
            self.port = int(runner.addresses[0][1])
        if pod_app.disagg is not None:
            pod_app.disagg.address = (self.host, self.port)
        self.pod_app, self._runner = pod_app, runner

    async def stop(self) -> None:
        """Stop as a crash would: in-flight requests are cut, the engine state is lost."""
        if self._runner is None:
            return
        assert self.pod_app is not None
        self.pod_app.close()
        runner, self._runner, self.pod_app = self._runner, None, None
        await runner.cleanup()
