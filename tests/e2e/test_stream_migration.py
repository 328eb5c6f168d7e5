"""Resume on break through `igw serve` (issue 33's must-hold, docs/migration.md): 20
concurrent streamed chat requests of 1,000 tokens on 2 emulated pods, each pod its own
`igw emulate` process; the pod serving the most of them is killed (SIGKILL), stopped
(SIGSTOP: a stall past the stream idle timeout) or sends vLLM's mid-stream SSE error
event. Every request ends with a `finish_reason` and no error, through the official
`openai` SDK; its text is byte for byte the text of the same request unbroken at
temperature 0 (asked of the healthy pod directly), and `usage` counts the prompt once and
each of the 1,000 completion tokens once, as do the gateway's own output-token count and
its token budget (the limit's remaining tokens fall by exactly the 20 answers' prompts
and tokens). Bounded: one load of 20 requests per fault, each
wait under a deadline.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import openai
import pytest

from inference_gateway.emulator.tokens import count_tokens, render_chat
from tests.e2e.serve_process import free_port, igw_serve

MODEL = "llama-3.1-8b"
REQUESTS = 20
TOKENS = 1000
CONFIG = {
    "scrape": {"intervalMs": 100, "stalenessMs": 3000, "timeoutMs": 500},
    "migration": {"streamIdleTimeoutMs": 1000, "deadlineMs": 10_000},
    # a token budget that never refuses here, read for what it was charged
    "rateLimits": [{"tokensPerMinute": 10_000_000, "windowS": 600}],
}
REASONS = {"kill": "connection", "stall": "stall", "error_event": "error_event"}
PROBE = [{"role": "user", "content": "probe"}]


def messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Request {i}: write a long essay about the sea."}]


@contextmanager
def pods(tmp_path: Path, *extra: list[str]) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One `igw emulate` process per entry of `extra` (its flags); killed on exit."""
    procs = []
    try:
        for i, flags in enumerate(extra):
            port = free_port()
            command = [sys.executable, "-m", "inference_gateway.cli.main", "emulate"]
            command += ["--gpu", "H100", "--model", MODEL, "--name", f"pod-{i}"]
            command += ["--host", "127.0.0.1", "--port", str(port), *flags]
            with (tmp_path / f"pod-{i}.log").open("ab") as log:
                proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            proc.port = port  # type: ignore[attr-defined]
            procs.append(proc)
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=10)


async def until_healthy(ports: list[int], within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    async with aiohttp.ClientSession() as session:
        for port in ports:
            while True:
                try:
                    async with session.get(f"http://127.0.0.1:{port}/health") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                assert time.monotonic() < deadline, f"pod on {port} did not come up"
                await asyncio.sleep(0.1)


def assert_spliced_whole(outcomes: list[Outcome], expected: list[str], tokens: int) -> None:
    """Every stream ended as the unbroken one would: no error, its finish reason, the
    same text, one id, one model, one role delta, and usage counting each token once."""
    for i, o in enumerate(outcomes):
        assert o.error is None, (i, o.error)
        assert o.finish == "length", (i, o.finish)
        assert o.text == expected[i], (i, len(o.text), len(expected[i]))
        assert len(o.ids or ()) == 1 and o.models == {MODEL}, (o.ids, o.models)
        assert o.roles == 1
        assert o.prompt_tokens == count_tokens(render_chat(messages(i)))
        assert o.completion_tokens == tokens


def charge(requests: int = REQUESTS, tokens: int = TOKENS) -> int:
    """What a token budget settles for requests `0..requests-1` answered `tokens` long:
    each prompt once and each completion token once, however often a stream broke."""
    return sum(count_tokens(render_chat(messages(i))) + tokens for i in range(requests))


async def unbroken_texts(port: int, requests: int = REQUESTS, tokens: int = TOKENS) -> list[str]:
    """Each request's text, asked of one healthy pod directly (temperature 0)."""
    api = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0
    )

    async def one(i: int) -> str:
        reply = await api.chat.completions.create(
            model=MODEL,
            messages=messages(i),
            max_tokens=tokens,
            temperature=0,  # type: ignore[arg-type]
        )
        content = reply.choices[0].message.content
        assert content is not None and count_tokens(content) == tokens
        return content

    texts = await asyncio.gather(*(one(i) for i in range(requests)))
    await api.close()
    return list(texts)


@dataclass
class Outcome:
    pod: str = ""
    text: str = ""
    finish: str | None = None
    error: str | None = None
    ids: set[str] | None = None
    models: set[str] | None = None
    roles: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tokens_seen: int = 0


async def stream_one(
    api: openai.AsyncOpenAI,
    i: int,
    out: Outcome,
    where: str = "x-gateway-destination-endpoint",
    tokens: int = TOKENS,
) -> None:
    """Request `i`, streamed, `tokens` long; `out.pod`: what the `where` header names."""
    out.ids, out.models = set(), set()
    try:
        raw = await api.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=messages(i),  # type: ignore[arg-type]
            max_tokens=tokens,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        out.pod = raw.headers.get(where, "")
        parts = []
        async for chunk in raw.parse():
            out.ids.add(chunk.id)
            out.models.add(chunk.model)
            if chunk.usage is not None:
                out.prompt_tokens = chunk.usage.prompt_tokens
                out.completion_tokens = chunk.usage.completion_tokens
            for choice in chunk.choices:
                if choice.delta.role:
                    out.roles += 1
                if choice.delta.content:
                    parts.append(choice.delta.content)
                    out.tokens_seen += 1
                if choice.finish_reason is not None:
                    out.finish = choice.finish_reason
            out.text = "".join(parts)
    except openai.APIError as error:
        out.error = f"{type(error).__name__}: {error}"


def start_streams(
    api: openai.AsyncOpenAI,
    requests: int = REQUESTS,
    where: str = "x-gateway-destination-endpoint",
    tokens: int = TOKENS,
) -> tuple[list[Outcome], list[asyncio.Task[None]]]:
    """`requests` concurrent `stream_one` calls (request `i` is stream `i`), started now."""
    outcomes = [Outcome() for _ in range(requests)]
    tasks = [
        asyncio.create_task(stream_one(api, i, outcomes[i], where, tokens)) for i in range(requests)
    ]
    return outcomes, tasks


def header_port(pod: str) -> int:
    """The port of a destination header's `ip:port`."""
    return int(pod.rsplit(":", 1)[1])


async def busiest_mid_answer(
    outcomes: list[Outcome],
    tasks: list[asyncio.Task[None]],
    port_of: Callable[[str], int] = header_port,
) -> tuple[Counter[str], str]:
    """Once every stream has its first token: the streams per target (`Outcome.pod`)
    and the target serving the most, with every one of its streams still mid-answer on
    its pod (`port_of` the target), as the fault must find them (a client on a loaded
    machine may lag the pod, the rest of an answer already waiting in socket buffers)."""
    deadline = time.monotonic() + 60
    while not all(o.tokens_seen for o in outcomes):  # every stream started
        assert time.monotonic() < deadline, "the streams did not start"
        assert not any(t.done() for t in tasks), [o.error for o in outcomes]
        await asyncio.sleep(0.05)
    serving = Counter(o.pod for o in outcomes)
    busiest = serving.most_common(1)[0][0]
    port = port_of(busiest)
    running = await metric_sum(f"http://127.0.0.1:{port}", "vllm:num_requests_running")
    assert running == serving[busiest], "the pod finished before the fault"
    return serving, busiest


async def metric_sum(url: str, name: str, label: str = "") -> float:
    """The sum of the samples of `name` on a /metrics page whose labels hold `label`."""
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as r:
        text = await r.text()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.split("{")[0].split(" ")[0] == name and label in line
    )


async def remaining_tokens(api: openai.AsyncOpenAI) -> tuple[int, int]:
    """The token limit's remaining count after a one-token request, and its usage total."""
    raw = await api.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=PROBE,  # type: ignore[arg-type]
        max_tokens=1,
        temperature=0,
    )
    reply = raw.parse()
    assert reply.usage is not None
    return int(raw.headers["x-ratelimit-remaining-tokens"]), reply.usage.total_tokens


async def run_with_fault(tmp_path: Path, fault: str) -> None:
    error_after = ["--stream-error-after-tokens", "300"] if fault == "error_event" else []
    # the error fault: pod-0 ends every stream after 300 tokens with vLLM's error event;
    # pod-1 is healthy (the unbroken texts are its own, and continuations go there)
    with pods(tmp_path, error_after, []) as procs:
        ports = [p.port for p in procs]  # type: ignore[attr-defined]
        await until_healthy(ports)
        expected = await unbroken_texts(ports[1])
        async with igw_serve(
            tmp_path, ports, "--debug-destination-headers", config=CONFIG
        ) as served:
            api = openai.AsyncOpenAI(
                base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=120
            )
            remaining_before, probe_total = await remaining_tokens(api)
            outcomes, tasks = start_streams(api)
            victim_port: int | None = None
            if fault == "error_event":
                victim_port = ports[0]
            else:
                _, busiest = await busiest_mid_answer(outcomes, tasks)
                victim_port = header_port(busiest)
                victim = procs[ports.index(victim_port)]
                victim.send_signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=180)
            # the budget settled each request once: its prompt and its 1,000 tokens
            remaining_after, _ = await remaining_tokens(api)
            await api.close()
            charged = remaining_before - remaining_after - probe_total
            assert charged == charge()
            broken = [o for o in outcomes if o.pod.endswith(f":{victim_port}")]
            assert broken, "no stream was on the pod that failed"
            assert_spliced_whole(outcomes, expected, TOKENS)
            url, total = served.url, "igw_request_migrations_total"
            resumed = await metric_sum(url, total, 'outcome="resumed"')
            assert resumed == len(broken) == await metric_sum(url, total)
            reason = REASONS[fault]
            assert await metric_sum(url, total, f'reason="{reason}"') == len(broken)
            gaps = await metric_sum(url, "igw_request_resume_gap_seconds_count")
            assert gaps == len(broken)
            gap_s = await metric_sum(url, "igw_request_resume_gap_seconds_sum") / gaps
            print(f"\n{fault}: {len(broken)}/{REQUESTS} streams resumed, mean gap {gap_s:.3f} s")
            # the gateway's own count of output tokens (what a token budget settles from)
            counted = await metric_sum(url, "inference_objective_output_tokens_sum")
            assert counted == REQUESTS * TOKENS + 2  # and the two probes' one token
            # one log line a migration, naming where the stream's end ran: the other pod
            served.process.terminate()
            logged = await asyncio.wait_for(served.stderr_text(), timeout=30)
            ends = re.findall(r"resumed after [\d.]+ s; its end is on pod (pod-\d)", logged)
            survivor = f"pod-{1 - ports.index(victim_port)}"
            assert ends == [survivor] * len(broken), logged[-3000:]


@pytest.mark.parametrize("fault", ["kill", "stall", "error_event"])
async def test_broken_streams_resume_with_the_unbroken_text(tmp_path: Path, fault: str) -> None:
    await run_with_fault(tmp_path, fault)
