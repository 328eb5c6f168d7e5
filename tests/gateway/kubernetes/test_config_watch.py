"""Live config: mounted files polled for changes, and custom resources watched through the
fake API server (list and watch with resourceVersion, see fake_apiserver.py). Invalid
updates are rejected — with a Warning Event from the API side — and the last good
state keeps serving."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from fake_apiserver import FakeApiServer

from inference_gateway.assembly.config_watch import FileConfigSource, KubernetesConfigSource
from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.traffic.rewrites import RewriteSet

CONFIGS = "/apis/inference.igw.dev/v1alpha1/namespaces/igw/inferencegatewayconfigs"
OBJECTIVES = "/apis/inference.networking.x-k8s.io/v1alpha2/namespaces/igw/inferenceobjectives"
REWRITES = "/apis/inference.networking.x-k8s.io/v1alpha2/namespaces/igw/inferencemodelrewrites"

SPEC = {
    "pools": [{"name": "chat", "selector": {"app": "vllm"}}],
    "models": [{"name": "llama", "pool": "chat", "adapters": ["sql"]}],
}


def gateway_config(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "inference.igw.dev/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "igw", "namespace": "igw"},
        "spec": spec,
    }


def rewrite(target: str, name: str = "canary") -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
        "kind": "InferenceModelRewrite",
        "metadata": {"name": name, "namespace": "igw"},
        "spec": {
            "rules": [
                {
                    "matches": [{"model": {"type": "Exact", "value": "assistant"}}],
                    "targets": [{"modelRewrite": target, "weight": 1}],
                }
            ]
        },
    }


class Applied:
    """Records every state handed to `apply`."""

    def __init__(self) -> None:
        self.states: list[tuple[GatewayConfigSpec | None, RewriteSet]] = []

    def __call__(self, config: GatewayConfigSpec | None, rewrites: RewriteSet) -> None:
        self.states.append((config, rewrites))


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


def write(path: Path, data: Any, bump: int) -> None:
    path.write_text(yaml.safe_dump(data))
    stamp = 1_700_000_000 + bump  # explicit mtimes: no reliance on clock granularity
    os.utime(path, (stamp, stamp))


async def test_file_source_applies_valid_edits_and_keeps_the_last_good(tmp_path: Path) -> None:
    config, rewrites = tmp_path / "config.yaml", tmp_path / "rewrites.yaml"
    write(config, gateway_config(SPEC), 0)
    write(rewrites, rewrite("sql"), 0)
    applied = Applied()
    source = FileConfigSource(applied, config, rewrites, interval_s=0.02)
    await source.start()
    try:
        assert len(applied.states) == 1
        assert applied.states[0][1].rewrite("assistant") == "sql"
        write(rewrites, rewrite("no-such-model"), 1)  # invalid: unknown target
        await until(lambda: source.watcher.failures == 1)
        assert len(applied.states) == 1
        write(config, gateway_config({**SPEC, "defaultProfile": "throughput"}), 2)
        write(rewrites, rewrite("llama"), 2)
        await until(lambda: len(applied.states) == 2)
        new_config, new_rewrites = applied.states[1]
        assert new_config is not None and new_config.default_profile == "throughput"
        assert new_rewrites.rewrite("assistant") == "llama"
    finally:
        await source.stop()


async def test_kubernetes_source_watches_config_objectives_and_rewrites(
    apiserver: FakeApiServer, client: Any
) -> None:
    apiserver.put(CONFIGS, gateway_config(SPEC))
    applied = Applied()
    source = KubernetesConfigSource(applied, client, "igw", backoff_s=(0.01, 0.05))
    await source.start()
    try:
        await source.wait_synced()
        await until(lambda: len(applied.states) == 1)
        config, rewrites = applied.states[-1]
        assert config is not None and [m.name for m in config.models] == ["llama"]
        assert not rewrites

        apiserver.put(REWRITES, rewrite("sql"))
        await until(lambda: len(applied.states) == 2)
        assert applied.states[-1][1].rewrite("assistant") == "sql"

        objective = {
            "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
            "kind": "InferenceObjective",
            "metadata": {"name": "critical-chat", "namespace": "igw"},
            "spec": {"priority": 10, "poolRef": {"name": "chat"}},
        }
        apiserver.put(OBJECTIVES, objective)
        await until(lambda: len(applied.states) == 3)
        config = applied.states[-1][0]
        assert config is not None
        assert [(o.name, o.priority, o.pool) for o in config.objectives] == [
            ("critical-chat", 10, "chat")
        ]
    finally:
        await source.stop()


async def test_kubernetes_source_rejects_invalid_updates_with_an_event(
    apiserver: FakeApiServer, client: Any
) -> None:
    apiserver.put(CONFIGS, gateway_config(SPEC))
    applied = Applied()
    source = KubernetesConfigSource(applied, client, "igw", backoff_s=(0.01, 0.05))
    await source.start()
    try:
        await source.wait_synced()
        await until(lambda: len(applied.states) == 1)
        bad = {**SPEC, "models": [{"name": "llama", "pool": "nowhere"}]}
        apiserver.put(CONFIGS, gateway_config(bad))
        await until(lambda: source.rejected == 1)
        await until(lambda: len(apiserver.events) == 1)
        assert len(applied.states) == 1  # the last good config keeps serving
        event = apiserver.events[0]
        assert event["type"] == "Warning" and event["reason"] == "InvalidConfig"
        assert event["involvedObject"]["kind"] == "InferenceGatewayConfig"
        assert "models[0].pool: unknown pool 'nowhere'" in event["message"]

        apiserver.put(CONFIGS, gateway_config(SPEC))
        await until(lambda: len(applied.states) == 2)
    finally:
        await source.stop()
