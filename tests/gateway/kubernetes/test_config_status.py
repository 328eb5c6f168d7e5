"""The InferenceGatewayConfig's status, written by the picker through the fake API server
(a merge patch on the `status` subresource, see fake_apiserver.py), so `kubectl get igwc`
says what is wrong: an invalid config, a selector that matches no pod, every pod stale."""

from __future__ import annotations

from typing import Any

from fake_apiserver import FakeApiServer
from test_config_watch import CONFIGS, SPEC, Applied, gateway_config, until

from inference_gateway.assembly.config_watch import KubernetesConfigSource
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.kubernetes.config_status import (
    ConfigStatusWriter,
    build_status,
    pool_counts,
    rollout_state,
)


def pods(pool: str, fresh: int, stale: int) -> list[Endpoint]:
    out = []
    for i in range(fresh + stale):
        endpoint = Endpoint(f"{pool}-{i}", "10.0.0.1", 8000 + i, pool=pool)
        endpoint.stale = i >= fresh
        out.append(endpoint)
    return out


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_status_names_what_is_wrong_per_pool() -> None:
    healthy = build_status(pool_counts({"chat": pods("chat", 2, 1)}, ["chat"]), None, 4)
    assert conditions(healthy) == {
        "Accepted": ("True", "Accepted"),
        "Ready": ("True", "PodsReady"),
        "Degraded": ("False", "AsExpected"),
    }
    assert healthy["pools"] == [{"name": "chat", "ready": 2, "stale": 1, "total": 3}]
    assert healthy["observedGeneration"] == 4

    empty = build_status(pool_counts({}, ["chat"]), None, 1)
    assert conditions(empty)["Degraded"] == ("True", "SelectorMatchesNoPods")
    assert conditions(empty)["Ready"] == ("False", "NoReadyPods")
    assert "selector matches no pods: chat" in empty["conditions"][2]["message"]

    stale = build_status(pool_counts({"chat": pods("chat", 0, 2)}, ["chat"]), None, 1)
    assert conditions(stale)["Degraded"] == ("True", "AllPodsStale")

    invalid = build_status(pool_counts({}, []), "models[0].pool: unknown pool 'x'", 2)
    assert conditions(invalid)["Accepted"] == ("False", "Invalid")
    assert conditions(invalid)["Ready"] == ("False", "NoPools")


def test_each_pool_has_the_managed_add_ons_rollout_state() -> None:
    """`status.schedulers[].rolloutState` with the managed add-on's values (its
    troubleshooting guide: Pending, Progressing, Available, Degraded), beside the
    conditions; a pool of the resource that the served config lacks is Pending."""
    counts = pool_counts(
        {
            "up": pods("up", 2, 0),
            "rolling": pods("rolling", 1, 1),
            "down": pods("down", 0, 2),
        },
        ["up", "rolling", "down", "empty"],
    )
    assert {c.name: rollout_state(c) for c in counts} == {
        "up": "Available",
        "rolling": "Progressing",
        "down": "Degraded",
        "empty": "Pending",
    }
    status = build_status(counts, "models[1].pool: unknown pool", 3, ["up", "new"])
    assert status["schedulers"] == [
        {"name": "down", "rolloutState": "Degraded"},
        {"name": "empty", "rolloutState": "Pending"},
        {"name": "new", "rolloutState": "Pending"},
        {"name": "rolling", "rolloutState": "Progressing"},
        {"name": "up", "rolloutState": "Available"},
    ]
    assert [c["type"] for c in status["conditions"]] == ["Accepted", "Ready", "Degraded"]


async def test_picker_writes_status_on_change_only_and_only_when_leading(
    apiserver: FakeApiServer, client: Any
) -> None:
    apiserver.put(
        CONFIGS,
        {**gateway_config(SPEC), "metadata": {**gateway_config(SPEC)["metadata"], "generation": 3}},
    )
    source = KubernetesConfigSource(Applied(), client, "igw", backoff_s=(0.01, 0.05))
    endpoints = {"chat": pods("chat", 1, 0)}
    leading = [False]
    writer = ConfigStatusWriter(
        client,
        "igw",
        resource=source.served_resource,
        config_error=lambda: source.last_error,
        pools=lambda: endpoints,
        declared=lambda: ["chat"],
        is_leader=lambda: leading[0],
    )
    await source.start()
    try:
        await source.wait_synced()
        assert not await writer.write_once()  # a standby replica never writes
        leading[0] = True
        assert await writer.write_once()
        content_type, body = apiserver.status_patches[-1]
        assert content_type == "application/merge-patch+json"
        assert set(body) == {"status"}  # the status subresource: nothing else is sent
        assert conditions(body["status"])["Ready"] == ("True", "PodsReady")
        assert body["status"]["observedGeneration"] == 3
        assert not await writer.write_once()  # nothing changed: no write

        endpoints["chat"][0].stale = True
        assert await writer.write_once()
        status = apiserver.collections[CONFIGS]["igw"]["status"]
        assert conditions(status)["Degraded"] == ("True", "AllPodsStale")
        assert status["pools"] == [{"name": "chat", "ready": 0, "stale": 1, "total": 1}]
        assert status["schedulers"] == [{"name": "chat", "rolloutState": "Degraded"}]
        assert apiserver.collections[CONFIGS]["igw"]["spec"] == SPEC

        bad = {**SPEC, "models": [{"name": "llama", "pool": "nowhere"}]}
        apiserver.put(CONFIGS, gateway_config(bad))
        await until(lambda: source.rejected == 1)
        assert await writer.write_once()
        accepted = apiserver.collections[CONFIGS]["igw"]["status"]["conditions"][0]
        assert (accepted["status"], accepted["reason"]) == ("False", "Invalid")
        assert "unknown pool 'nowhere'" in accepted["message"]
    finally:
        await source.stop()


async def test_igw_picker_in_kubernetes_mode_reports_a_selector_that_matches_nothing(
    apiserver: FakeApiServer,
) -> None:
    """The wiring of `igw picker` itself: no pod carries the pool's labels, so the status
    it writes says so (the message an operator sees in `kubectl describe igwc`)."""
    from inference_gateway.cli.main import build_parser
    from inference_gateway.cli.picker import kubernetes_options, server_options
    from inference_gateway.kubernetes.picker import KubernetesMode

    apiserver.put(CONFIGS, gateway_config(SPEC))
    argv = ["picker", "--api-server", apiserver.url, "--namespace", "igw"]
    argv += ["--host", "127.0.0.1", "--grpc-port", "0", "--metrics-port", "0"]
    argv += ["--status-interval", "0.05"]
    args = build_parser("picker").parse_args(argv)
    mode = await KubernetesMode.connect(kubernetes_options(args))
    picker = mode.server(**server_options(args))
    await picker.start()
    try:
        await until(lambda: "status" in apiserver.collections[CONFIGS]["igw"])
        status = apiserver.collections[CONFIGS]["igw"]["status"]
        assert conditions(status)["Accepted"] == ("True", "Accepted")
        assert conditions(status)["Degraded"] == ("True", "SelectorMatchesNoPods")
        assert status["pools"] == [{"name": "chat", "ready": 0, "stale": 0, "total": 0}]
    finally:
        await picker.stop(grace_s=0)
        await mode.close()
