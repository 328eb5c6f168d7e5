"""Config reload that never fails silently: every rejected edit of a watched file is
logged with its reason and counted in `igw_config_reloads_total`, the watcher keeps
watching, and a later valid edit applies. An empty or comment-only config file is an
error (`{}` asks for the defaults on purpose). Real files on disk, polled by the real
watcher; both the picker's `FileConfigSource` and `igw serve`'s watcher."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from inference_gateway.assembly.config_watch import FileConfigSource
from inference_gateway.assembly.serve import WATCHER, build_gateway
from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling.config_checks import load_config
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.core.traffic.rewrites import RewriteSet
from inference_gateway.errors import ConfigError
from inference_gateway.telemetry.metrics import GatewayMetrics

SPEC = {
    "pools": [{"name": "chat", "selector": {"app": "vllm"}}],
    "models": [{"name": "llama", "pool": "chat"}],
}
REWRITE = {
    "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
    "kind": "InferenceModelRewrite",
    "metadata": {"name": "canary"},
    "spec": {
        "rules": [
            {
                "matches": [{"model": {"type": "Exact", "value": "assistant"}}],
                "targets": [{"modelRewrite": "llama", "weight": 1}],
            }
        ]
    },
}
# (file to spoil, bytes written, a phrase the log line must carry)
BAD_EDITS = {
    "invalid-utf8-config": ("config", b"pools:\n  - name: \xff\xfe\n", "not UTF-8"),
    "invalid-utf8-rewrites": ("rewrites", b"kind: \xc3\x28\n", "UnicodeDecodeError"),
    "yaml-error": ("config", b"pools: [unclosed\n", "invalid YAML"),
    "schema-error": ("config", b"pools: []\nnoSuchField: 1\n", "noSuchField"),
    "empty": ("config", b"", "empty"),
    "comments-only": ("config", b"# all commented out\n# pools: []\n", "empty"),
}


def write(path: Path, data: bytes, bump: int) -> None:
    path.write_bytes(data)
    stamp = 1_700_000_000 + bump  # explicit mtimes: no reliance on clock granularity
    os.utime(path, (stamp, stamp))


def reloads(metrics: GatewayMetrics, result: str) -> float:
    value = metrics.registry.get_sample_value(
        "igw_config_reloads_total", {"source": "file", "result": result}
    )
    return value or 0.0


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("case", sorted(BAD_EDITS))
async def test_picker_file_source_logs_counts_and_keeps_watching(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    config, rewrites = tmp_path / "config.yaml", tmp_path / "rewrites.yaml"
    write(config, yaml.safe_dump(SPEC).encode(), 0)
    write(rewrites, yaml.safe_dump(REWRITE).encode(), 0)
    applied: list[tuple[GatewayConfigSpec | None, RewriteSet]] = []
    metrics = GatewayMetrics()
    source = FileConfigSource(
        lambda c, r: applied.append((c, r)), config, rewrites, interval_s=0.02, metrics=metrics
    )
    await source.start()
    try:
        which, data, reason = BAD_EDITS[case]
        with caplog.at_level(logging.ERROR):
            write(config if which == "config" else rewrites, data, 1)
            await until(lambda: reloads(metrics, "rejected") == 1)
        assert len(applied) == 1  # the last good state keeps serving
        # the gateway's own lines only: a client another test leaked can log its
        # "Task exception was never retrieved" (asyncio's logger) in this window
        ours = [r for r in caplog.records if r.name.startswith("inference_gateway")]
        assert any(reason in r.getMessage() for r in ours), caplog.text
        assert not any(r.exc_info for r in ours)  # a reason, not a traceback
        write(config, yaml.safe_dump({**SPEC, "defaultProfile": "throughput"}).encode(), 2)
        write(rewrites, yaml.safe_dump(REWRITE).encode(), 2)
        await until(lambda: len(applied) == 2)  # the watcher survived
        new_config = applied[-1][0]
        assert new_config is not None and new_config.default_profile == "throughput"
        assert reloads(metrics, "applied") == 1
    finally:
        await source.stop()


async def test_igw_serve_watcher_survives_and_counts_a_bad_edit(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    write(config, yaml.safe_dump({"defaultProfile": "latency"}).encode(), 0)
    # a pod nobody listens on: scrapes fail quietly, the gateway still starts
    app, gateway = build_gateway([Endpoint("pod", "127.0.0.1", 9, pool="p")], config)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        watcher = app[WATCHER]
        write(config, b"defaultProfile: \xff\n", 1)
        assert await watcher.check() is False  # rejected, not raised
        write(config, yaml.safe_dump({"defaultProfile": "throughput"}).encode(), 2)
        assert await watcher.check() is True
        assert reloads(gateway.metrics, "rejected") == 1
        assert reloads(gateway.metrics, "applied") == 1
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("text", ["", "\n\n", "# nothing here\n", "---\n"])
def test_an_empty_config_file_is_an_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="empty or holds only comments"):
        load_config(path)


def test_an_explicit_empty_mapping_means_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("# defaults on purpose\n{}\n")
    assert load_config(path) == GatewayConfigSpec()


def test_invalid_utf8_is_a_config_error_with_the_byte_offset(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"pools: []\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"not UTF-8 text: .* at byte 15"):
        load_config(path)


# ---------------------------------------------------------------- reload off the loop


def slow_config(models: int = 9_000) -> bytes:
    """A valid config of ~300 KB (under the 1 MiB limit) that takes a while to read."""
    return yaml.safe_dump(
        {**SPEC, "models": [{"name": f"model-{i:05d}", "pool": "chat"} for i in range(models)]}
    ).encode()


class Ticks:
    """How many times a 5 ms ticker ran: a loop held by a reload does not tick."""

    def __init__(self) -> None:
        self.count = 0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.005)
            self.count += 1

    def __enter__(self) -> Ticks:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def timed_check(check: Callable[[], Any]) -> tuple[bool, float]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(60):
        result = check()  # a watcher that parses on the loop answers at once, late
        if inspect.isawaitable(result):
            result = await result
    return bool(result), loop.time() - started


async def test_igw_serve_reloads_off_the_loop_and_refuses_a_30_mb_config(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 31 finding 15: a 30 MB config stalled `/health` for 10 s. Now a file over
    one ConfigMap's worth (1 MiB) is refused without being parsed, and a config that
    takes a while to read is loaded in a process of its own: `/health` keeps answering
    (counted, not timed: a loop held by the reload answers nothing meanwhile)."""
    config = tmp_path / "config.yaml"
    write(config, yaml.safe_dump(SPEC).encode(), 0)
    app, gateway = build_gateway([Endpoint("pod", "127.0.0.1", 9, pool="p")], config)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    answered = [0]

    async def probe(session: aiohttp.ClientSession) -> None:
        while True:
            async with session.get(f"http://127.0.0.1:{port}/health") as response:
                await response.read()  # 503 here (no pod is up): an answer all the same
            answered[0] += 1
            await asyncio.sleep(0.01)

    try:
        watcher = app[WATCHER]
        async with aiohttp.ClientSession() as session:
            prober = asyncio.create_task(probe(session))
            try:
                write(config, b"pools: []\n" + b"# padding\n" * 3_000_000, 1)  # 30 MB
                with caplog.at_level(logging.ERROR):
                    applied, _ = await timed_check(watcher.check)
                assert not applied and "over the limit of 1048576 bytes" in caplog.text
                write(config, slow_config(), 2)
                before = answered[0]
                applied, took = await timed_check(watcher.check)
                assert applied and gateway.director.state.config is not None
                assert len(gateway.director.state.config.models) == 9_000
                assert answered[0] - before >= 10, (answered[0] - before, took)
            finally:
                prober.cancel()
        assert reloads(gateway.metrics, "rejected") == 1
        assert reloads(gateway.metrics, "applied") == 1
    finally:
        await runner.cleanup()


async def test_the_pickers_file_source_reloads_off_the_loop(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    write(config, yaml.safe_dump(SPEC).encode(), 0)
    applied: list[GatewayConfigSpec | None] = []
    source = FileConfigSource(lambda c, r: applied.append(c), config, interval_s=3600)
    await source.start()
    try:
        write(config, slow_config(), 1)
        with Ticks() as ticks:
            changed, took = await timed_check(source.watcher.check)
        assert changed and len(applied) == 2
        assert ticks.count >= 10, (ticks.count, took)  # held by the reload: none
        write(config, b"pools: []\n" + b"# padding\n" * 110_000, 2)  # just over 1 MiB
        assert not await source.watcher.check() and len(applied) == 2
    finally:
        await source.stop()
