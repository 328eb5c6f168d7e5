"""`igw demo --sessions`: multi-turn chat sessions instead of single requests.

Each session is planned whole from the seed (start time, system prompt, every user
message, answer length and think time), then replayed against a gateway: each turn sends
the whole conversation so far (system prompt, earlier messages, the answers the gateway
streamed back) plus the next message, and the next turn waits for the answer and the
think time, as a person at a chat window does. Every request carries `x-session-id`
(the header llm-d and AIBrix read for session affinity); our gateway does not route on
it: with the pods' KV events the precise prefix scorer already finds the pod holding the
conversation, and a session id would only pin turns to a pod that may have evicted it.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Session", "make_sessions", "replay_sessions"]

SESSION_HEADER = "x-session-id"


@dataclass(slots=True)
class Session:
    sid: str
    start: float
    system: str
    turns: list[tuple[str, int, float]]  # user message, max_tokens, think time after
    messages: list[dict[str, str]] = field(default_factory=list)  # as replayed


def make_sessions(
    duration: float, rate: float, seed: int, systems: list[str], words: list[str]
) -> list[Session]:
    """Sessions starting at `rate` per second (Poisson) for `duration` seconds."""
    rnd = random.Random(seed)
    out: list[Session] = []
    t = 0.0
    while True:
        t += rnd.expovariate(rate)
        if t >= duration:
            return out
        turns = [
            (
                " ".join(rnd.choice(words) for _ in range(int(rnd.lognormvariate(4.0, 0.5)))),
                max(4, int(rnd.lognormvariate(3.4, 0.5))),
                rnd.lognormvariate(1.0, 0.5),  # median ~2.7 s: a fast typist, a short demo
            )
            for _ in range(max(2, int(rnd.lognormvariate(1.4, 0.4))))
        ]
        out.append(Session(f"s{len(out)}", t, rnd.choice(systems), turns))


async def replay_sessions(
    base_url: str, sessions: list[Session], outcome: Any, progress: Any
) -> None:
    """Replay every session (concurrently, each turn after the last answer); record each
    turn's TTFT and latency in `outcome` (`ttft`, `e2e`, `tokens`, `errors`)."""
    from openai import AsyncOpenAI, AsyncStream

    client = AsyncOpenAI(base_url=base_url, api_key="demo", max_retries=0, timeout=120)
    start = time.perf_counter()

    async def run(session: Session) -> None:
        await asyncio.sleep(max(0.0, session.start - (time.perf_counter() - start)))
        session.messages = [{"role": "system", "content": session.system}]
        for message, max_tokens, think in session.turns:
            session.messages.append({"role": "user", "content": message})
            sent = time.perf_counter()
            answer: list[str] = []
            try:
                stream = await client.chat.completions.create(
                    model="llama-3.1-8b",
                    messages=session.messages,  # type: ignore[arg-type]
                    max_tokens=max_tokens,
                    stream=True,
                    extra_headers={SESSION_HEADER: session.sid},
                )
                assert isinstance(stream, AsyncStream)  # stream=True: the SDK's contract
                first = None
                async for chunk in stream:
                    if first is None:
                        first = time.perf_counter() - sent
                    if chunk.choices and chunk.choices[0].delta.content:
                        answer.append(chunk.choices[0].delta.content)
                        outcome.tokens += 1
                outcome.ttft.append(first if first is not None else time.perf_counter() - sent)
                outcome.e2e.append(time.perf_counter() - sent)
            except Exception:  # an error is a result here: counted, and the user leaves
                outcome.errors += 1
                progress.advance()
                return
            session.messages.append({"role": "assistant", "content": "".join(answer)})
            progress.advance()
            await asyncio.sleep(think)

    await asyncio.gather(*(run(s) for s in sessions))
    outcome.wall = time.perf_counter() - start
    await client.close()
