"""`igw demo --sessions` end to end: emulated pods publishing KV events, the real gateway
subscribing to them, multi-turn sessions through the official `openai` SDK."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from inference_gateway.assembly.serve import build_gateway
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.demo.run import kv_events_fleet
from inference_gateway.demo.sessions import make_sessions, replay_sessions
from inference_gateway.demo.trace import Outcome, demo_text
from inference_gateway.emulator.fleet import EmulatedFleet


class Quiet:
    def advance(self) -> None:
        return None


async def test_sessions_carry_their_answers_and_the_gateway_reads_the_pods_events(
    tmp_path: Path,
) -> None:
    small = {"base_port": 0, "pods": [{"name": "h100", "gpu": "H100", "model": "llama-3.1-8b",
                                       "replicas": 2}]}  # fmt: skip
    systems, words = demo_text(random.Random(3))
    sessions = make_sessions(3.0, 1.0, 3, systems, words)[:2]
    assert sessions and all(len(s.turns) >= 2 for s in sessions)
    for session in sessions:  # at once: a person's think time is not what is tested
        session.start = 0.0
        session.turns = [(message, tokens, 0.0) for message, tokens, _ in session.turns]
    async with EmulatedFleet(kv_events_fleet(str(tmp_path), small)) as fleet:
        endpoints = [
            Endpoint(e.name, e.host, e.port, pool="p", labels={**e.labels, "igw.dev/pool": "p"})
            for e in fleet.endpoints
        ]
        assert all(e.labels["igw.dev/kv-events"].startswith("ipc://") for e in endpoints)
        app, _ = build_gateway(endpoints)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            outcome: Any = Outcome()
            await replay_sessions(f"http://127.0.0.1:{port}/v1", sessions, outcome, Quiet())
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{port}/metrics") as response,
            ):
                text = await response.text()
        finally:
            await runner.cleanup()
    assert outcome.errors == 0 and len(outcome.ttft) == sum(len(s.turns) for s in sessions)
    for session in sessions:  # every turn's prompt held the answers before it
        roles = [m["role"] for m in session.messages]
        assert roles == ["system"] + ["user", "assistant"] * len(session.turns)
        assert all(m["content"] for m in session.messages if m["role"] == "assistant")
    ingested = [line for line in text.splitlines() if line.startswith("igw_kv_events_ingested")]
    assert ingested and float(ingested[0].split()[-1]) > 0
    share = [line for line in text.splitlines() if line.startswith("igw_kv_recompute_share ")]
    assert share and float(share[0].split()[-1]) == 0.0  # two H100s evict nothing here
