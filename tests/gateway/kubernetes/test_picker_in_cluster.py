"""`igw picker` in Kubernetes mode, end to end on loopback: pods from the fake API server
(list and watch with resourceVersion and 410 semantics, see fake_apiserver.py), config
from a file plus InferenceModelRewrites watched in the API, an emulated vLLM pod behind,
and Envoy's side played by the fake Envoy of the picker tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import orjson
import yaml
from fake_apiserver import FakeApiServer, pod
from fake_envoy import FakeEnvoy

from inference_gateway.cli.main import build_parser
from inference_gateway.cli.picker import kubernetes_options, server_options
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.kubernetes.picker import KubernetesMode

PODS = "/api/v1/namespaces/igw/pods"
REWRITES = "/apis/inference.networking.x-k8s.io/v1alpha2/namespaces/igw/inferencemodelrewrites"
CHAT = "/v1/chat/completions"


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


def chat(model: str) -> bytes:
    return orjson.dumps(
        {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    )


async def test_discovers_pods_applies_api_rewrites_and_drops_unready_pods(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    solo = {"name": "solo", "gpu": "H100", "model": "llama-3.1-8b", "adapters": ["sql"]}
    async with EmulatedFleet({"base_port": 0, "pods": [solo]}) as fleet:
        port = fleet.endpoints[0].port
        config = tmp_path / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "pools": [{"name": "chat", "selector": {"app": "vllm"}, "targetPort": port}],
                    "models": [{"name": "llama-3.1-8b", "pool": "chat", "adapters": ["sql"]}],
                    # a pool without pods holds a request this long (scale from zero)
                    "flowControl": {"bands": {"standard": {"maxQueue": 4, "ttlS": 0.3}}},
                }
            )
        )
        apiserver.put(PODS, pod("solo-0", "127.0.0.1", labels={"app": "vllm"}))
        argv = ["picker", "--config", str(config), "--api-server", apiserver.url]
        argv += ["--namespace", "igw", "--host", "127.0.0.1", "--grpc-port", "0"]
        args = build_parser("picker").parse_args([*argv, "--metrics-port", "0"])
        mode = await KubernetesMode.connect(kubernetes_options(args))
        picker = mode.server(**server_options(args))
        await picker.start()
        try:
            await until(lambda: picker.serving)
            async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
                plain = await envoy.exchange(CHAT, chat("llama-3.1-8b"))
                assert plain.destination == f"127.0.0.1:{port}" and plain.status == 200

                apiserver.put(
                    REWRITES,
                    {
                        "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
                        "kind": "InferenceModelRewrite",
                        "metadata": {"name": "canary", "namespace": "igw"},
                        "spec": {
                            "rules": [
                                {
                                    "matches": [{"model": {"value": "assistant"}}],
                                    "targets": [{"modelRewrite": "sql", "weight": 1}],
                                }
                            ]
                        },
                    },
                )
                await until(lambda: bool(picker.director.state.rewrites))
                canary = await envoy.exchange(CHAT, chat("assistant"))
                assert orjson.loads(canary.upstream_body)["model"] == "sql"
                assert orjson.loads(canary.response_body)["model"] == "assistant"

                apiserver.put(PODS, pod("solo-0", "127.0.0.1", ready=False, labels={"app": "vllm"}))
                await until(lambda: not picker.store.endpoints)
                gone = await envoy.exchange(CHAT, chat("llama-3.1-8b"))
                assert gone.immediate is not None and gone.immediate.status.code == 503
        finally:
            await picker.stop(grace_s=0)
            await mode.close()


async def test_readiness_is_serving_with_zero_pods_once_the_pools_are_listed(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """Issue 22's deadlock: the picker (sync wave 0) must be Ready before any vLLM pod
    (wave 2) exists. With the pool listed and empty, `readiness` is SERVING on the plain
    health port the kubelet probes (upstream's EPP: SERVING once its datastore has synced
    the pool, pods or not); the API server is the fake of fake_apiserver.py."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "pools": [{"name": "chat", "selector": {"app": "vllm"}, "targetPort": 8000}],
                "models": [{"name": "llama-3.1-8b", "pool": "chat"}],
            }
        )
    )
    argv = ["picker", "--config", str(config), "--api-server", apiserver.url]
    argv += ["--namespace", "igw", "--host", "127.0.0.1", "--grpc-port", "0"]
    argv += ["--grpc-health-port", "0", "--metrics-port", "0"]
    args = build_parser("picker").parse_args(argv)
    mode = await KubernetesMode.connect(kubernetes_options(args))
    picker = mode.server(**server_options(args))
    await picker.start()
    try:
        await until(lambda: picker.serving)
        assert picker.store.endpoints == [] and picker.synced()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{picker.health_bound}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for service in ("readiness", "liveness"):
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING, service
    finally:
        await picker.stop(grace_s=0)
        await mode.close()


async def test_leader_elect_status_keeps_every_replica_ready_and_one_status_writer(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """`--leader-elect-status` (the chart's rendering of the managed schedulers' leader
    election): a replica that does not hold the Lease is still ready and routes; only the
    holder is the status writer. `--leader-elect` (active-passive) gates readiness."""
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "pools": [{"name": "chat", "selector": {"app": "vllm"}, "targetPort": 8000}],
                "models": [{"name": "llama-3.1-8b", "pool": "chat"}],
            }
        )
    )
    leases = "/apis/coordination.k8s.io/v1/namespaces/igw/leases"
    apiserver.put(
        leases,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "igw-picker", "namespace": "igw"},
            "spec": {
                "holderIdentity": "another-replica",
                "leaseDurationSeconds": 3600,
                "renewTime": "2099-01-01T00:00:00.000000Z",
            },
        },
    )
    for flag, ready in (("--leader-elect-status", True), ("--leader-elect", False)):
        argv = ["picker", "--config", str(config), "--api-server", apiserver.url, flag]
        argv += ["--namespace", "igw", "--host", "127.0.0.1", "--grpc-port", "0"]
        argv += ["--metrics-port", "0"]
        args = build_parser("picker").parse_args(argv)
        mode = await KubernetesMode.connect(kubernetes_options(args))
        picker = mode.server(**server_options(args))
        await picker.start()
        try:
            await until(picker.synced)
            await picker.update_health()
            assert not mode.is_leader()  # another replica holds the lease
            assert picker.ready() is ready, flag
        finally:
            await picker.stop(grace_s=0)
            await mode.close()
