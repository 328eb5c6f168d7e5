"""The real-time driver: one `Engine` stepped by the wall clock on the asyncio loop.

The engine is a passive state machine (see `engine.py`): it only moves when told the
time. This driver tells it `time.monotonic()` at every arrival (`advance` first, then
`submit`) and arms a single timer for `engine.busy_until`, so the engine's timeline is
the roofline model's, whatever the loop's lag: a late timer delivers its tokens late,
but never changes when the engine says they were produced.

Why one shared future per step: a stream that woke for each of its tokens would cost
200 streams × 100 tokens/s wakeups. Instead every streaming handler awaits the *same*
future, resolved once when a step (or a ≤ `max_segment_s` decode segment) commits; each
handler then writes all of its new tokens in one write. Non-streaming handlers await
their own `Ticket.done`, resolved once when their request finishes.

`time.monotonic()` is the only clock: uvloop's `loop.time()` is cached per loop turn at
millisecond resolution, so it is used only to *schedule* (`call_later`), never as "now".
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from inference_gateway.emulator.engine import Engine, EngineListener, EngineRequest
from inference_gateway.emulator.kvcache import KVEventSink
from inference_gateway.emulator.profiles import PodProfile
from inference_gateway.errors import InferenceGatewayError

__all__ = ["PodStoppedError", "RealtimeDriver", "Ticket"]

DEFAULT_SEGMENT_S = 0.02  # streamed tokens arrive in groups of at most ~20 ms


class PodStoppedError(InferenceGatewayError):
    """The pod was stopped while a request was in flight (an emulated pod death)."""


@dataclass(slots=True)
class Ticket:
    """The driver's handle on one request, kept in `EngineRequest.tag`.

    `finish_reason` is the OpenAI reason the server will report ("length" when the client
    set max_tokens, else "stop"); metrics read it when the request finishes.
    """

    done: asyncio.Future[None]
    finish_reason: str = "stop"


class RealtimeDriver:
    """Runs one engine in real time; `observer` sees first tokens and finishes (metrics)."""

    def __init__(
        self,
        profile: PodProfile,
        *,
        observer: EngineListener | None = None,
        max_segment_s: float = DEFAULT_SEGMENT_S,
        kv_sink: KVEventSink | None = None,
        prefix_caching: bool = True,
    ) -> None:
        self.engine = Engine(
            profile,
            listener=self,
            prefix_caching=prefix_caching,
            max_segment_s=max_segment_s,
            report_progress=True,
            kv_sink=kv_sink,
        )
        self.observer = observer
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due: float | None = None
        self._step_future: asyncio.Future[None] | None = None
        self._inflight: dict[int, EngineRequest] = {}
        self._stopped = False

    # ---------------------------------------------------------------- handler side

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def submit(self, request: EngineRequest, *, finish_reason: str = "stop") -> Ticket:
        """Hand a request to the engine now; the returned ticket resolves at its finish."""
        if self._stopped:
            raise PodStoppedError("pod is stopped")
        ticket = Ticket(self._loop.create_future(), finish_reason)
        request.tag = ticket
        self._inflight[request.request_id] = request
        now = time.monotonic()
        self.engine.advance(now)
        self.engine.submit(request, now)
        self._arm()
        return ticket

    async def next_step(self) -> None:
        """Wait until the engine commits its next step or segment.

        Shielded, so a cancelled handler (client gone, pod stopping) cannot cancel the
        future every other stream is waiting on.
        """
        if self._stopped:
            raise PodStoppedError("pod is stopped")
        future = self._step_future
        if future is None:
            future = self._step_future = self._loop.create_future()
        await asyncio.shield(future)

    def abort(self, request: EngineRequest) -> None:
        """The client disconnected: the engine drops the request now (vLLM's abort), so
        its blocks and batch slot free at once and the pod's metrics say so; it is
        counted as finished with reason `abort`."""
        if self._stopped or request.request_id not in self._inflight:
            return
        ticket: Ticket = request.tag
        ticket.finish_reason = "abort"
        now = time.monotonic()
        self.engine.advance(now)
        self.engine.abort(request, now)
        self._arm()

    def sync(self) -> None:
        """Bring the engine up to now (before a metrics scrape)."""
        if not self._stopped:
            self.engine.advance(time.monotonic())
            self._arm()

    def close(self) -> None:
        """Stop stepping and fail every waiting handler with `PodStoppedError`."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        error = PodStoppedError("pod stopped")
        if self._step_future is not None and not self._step_future.done():
            self._step_future.set_exception(error)
            self._step_future.exception()  # mark retrieved: nobody may be waiting
        self._step_future = None
        for request in self._inflight.values():
            ticket: Ticket = request.tag
            if not ticket.done.done():
                ticket.done.set_exception(error)
                ticket.done.exception()
        self._inflight.clear()

    # ---------------------------------------------------------------- timer

    def _arm(self) -> None:
        """Keep exactly one timer, for the engine's current `busy_until`."""
        due = self.engine.busy_until
        if due == self._timer_due:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_due = due
        if due is not None:
            delay = max(0.0, due - time.monotonic())
            self._timer = self._loop.call_later(delay, self._on_timer, due)

    def _on_timer(self, due: float) -> None:
        self._timer = None
        self._timer_due = None
        # The loop's timers may fire up to a millisecond early; the step is due anyway.
        self.engine.advance(max(time.monotonic(), due))
        self._arm()

    # ---------------------------------------------------------------- engine listener

    def on_first_token(self, request: EngineRequest, time: float) -> None:
        if self.observer is not None:
            self.observer.on_first_token(request, time)

    def on_step(self, time: float) -> None:
        future = self._step_future
        if future is not None:
            self._step_future = None
            if not future.done():
                future.set_result(None)

    def on_finish(self, request: EngineRequest, time: float) -> None:
        self._inflight.pop(request.request_id, None)
        if self.observer is not None:
            self.observer.on_finish(request, time)
        ticket: Ticket = request.tag
        if not ticket.done.done():
            ticket.done.set_result(None)
