"""Every rendered pod starts as its cluster would start it, from what ships, and passes its probes.

For each environment and region, the objects Argo CD applies there (rendered_cluster.py)
are read, and every container of every workload is started by the kubelet harness
(kubelet.py, container_init.py) from what its image really holds:

* this project's image is the environment `make image-env` replays from
  gateway_src/Dockerfile (tools/image_env.py): its lock, its package, its Entrypoint, Cmd,
  Env and User, so a module the servers import that the Dockerfile's steps do not install
  stops a pod here;
* a vLLM image runs the emulator under the rendered `vllm serve` command line
  (`inference_gateway.emulator.vllm_cli`: vLLM v0.11.0's own flags, and its start-up rules
  that depend on the container, such as torch's need for a user name).

Each container runs as its `runAsUser` with no passwd entry, read-only root where set,
its ConfigMaps, Secrets (External Secrets' templates rendered from a fake Secrets
Manager) and emptyDirs mounted, in a network namespace of its own, beside what it needs:
the Kubernetes API (a stand-in served over TLS to the in-cluster configuration: no API
server runs here), a real redis-server for the store, and the model-server pods (the
picker discovers them through the API and scrapes them). Its startup, readiness and
liveness probes must pass within the spec's own thresholds, and SIGTERM must end it
within its grace period. Needs root (namespaces, mounts, the uid switch): `make test`
runs as root in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from fake_control_plane import ApiServerThread, EnvoyGateway, RedisServer
from kubelet import Container, Image, PodContext, PodStartError
from podnet import PodNetwork
from rendered_cluster import (
    ENVIRONMENTS,
    ROOT,
    Cluster,
    FakeSecretsManager,
    cluster_objects,
    exact_routes,
    pod_template_labels,
    regions,
    required_node_labels,
    service_target,
)

from inference_gateway.emulator import vllm_cli

IMAGE_ENV = ROOT / ".image"
NAMESPACE = "igw"
#: a key whose digest the test's API-key file holds (the file keeps digests only)
TEST_KEY_FILE = {"keys": [{"client": "team-a", "sha256": "0" * 64}]}
CASES = [
    (env.name, region) for env in sorted(ENVIRONMENTS.iterdir()) for region in regions(env.name)
]
CRD_KINDS = (
    "InferencePool",
    "InferenceObjective",
    "InferenceModelRewrite",
    "InferenceGatewayConfig",
)


def gateway_image() -> Image:
    config_path = IMAGE_ENV / "image.json"
    if not config_path.exists():
        pytest.fail("no image environment: run `make image-env` (make test builds it)")
    config = json.loads(config_path.read_text())
    base = config["BasePythonPrefix"]
    layers = ((str(IMAGE_ENV / "usr-local"), "/usr/local"), (base, base))
    return Image("gateway", config, layers)


def vllm_image(gateway: Image, folder: Path) -> Image:
    """vLLM's image config, with the emulator at vLLM's `vllm` executable: the image's
    bin folder plus a `vllm` script, bound where vLLM's image has its executables."""
    shim = folder / "vllm-bin"
    shutil.copytree(IMAGE_ENV / "usr-local" / "bin", shim, symlinks=True)
    script = shim / "vllm"
    script.write_text(
        "#!/usr/local/bin/python3.11\nimport sys\n"
        "from inference_gateway.emulator.vllm_cli import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    script.chmod(0o755)
    layers = (*gateway.layers, (str(shim), vllm_cli.VLLM_EXECUTABLE_DIR))
    return Image("vllm/vllm-openai", vllm_cli.VLLM_IMAGE_CONFIG, layers)


def image_for(reference: str, gateway: Image, vllm: Image) -> Image:
    repository = reference.rsplit(":", 1)[0]
    if repository.endswith("/gateway"):
        return gateway
    if repository.endswith("/vllm/vllm-openai"):
        return vllm
    raise AssertionError(f"image {reference} is not modelled by the pod harness")


def secrets_manager(environment: str, redis: RedisServer) -> FakeSecretsManager:
    store = {"url": redis.url, "password": redis.password}
    return FakeSecretsManager(
        {
            f"igw/{environment}/api-keys": yaml.safe_dump(TEST_KEY_FILE),
            f"igw/{environment}/hf-token": "hf_test_token_not_real",
            f"igw/{environment}/global-store/auth": {"password": redis.password},
            f"igw/{environment}/global-store/endpoint": {"url": redis.url},
            f"igw/{environment}/global-store/rate-limit": store,
        }
    )


def collection(obj: dict[str, Any]) -> str:
    group_version = obj["apiVersion"]
    plural = obj["kind"].lower() + "s"
    namespace = obj["metadata"].get("namespace", NAMESPACE)
    return f"/apis/{group_version}/namespaces/{namespace}/{plural}"


def as_pod(name: str, ip: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@pytest.fixture(scope="module")
def privileges() -> None:
    if os.geteuid() != 0:
        pytest.fail("the pod harness needs root (network and mount namespaces, a uid switch)")


@pytest.fixture
def network() -> Iterator[PodNetwork]:
    net = PodNetwork().open()
    yield net
    net.close()


class ClusterRun:
    """One region's pods on the pod network, with what they call started beside them."""

    def __init__(
        self,
        cluster: Cluster,
        network: PodNetwork,
        images: tuple[Image, Image],
        redis: RedisServer,
        api: ApiServerThread,
    ) -> None:
        self.cluster = cluster
        self.network = network
        self.gateway, self.vllm = images
        self.redis = redis
        self.api = api
        self.containers: list[Container] = []
        self.envoy: EnvoyGateway | None = None

    def place(self) -> None:
        """A pod (network namespace, address, volumes) for one replica of every workload,
        with all its containers."""
        secrets = self.cluster.secrets()
        config_maps = self.cluster.config_maps()
        for workload in self.cluster.workloads():
            pod = workload["spec"]["template"]["spec"]
            name = f"{workload['metadata']['name']}-0"
            netns, pod_ip = self.network.add_pod(name)
            context = PodContext(
                name=name,
                namespace=workload["metadata"].get("namespace", NAMESPACE),
                pod_ip=pod_ip,
                netns=netns,
                api_host=self.network.node_ip,
                api_port=self.api.port,
                secrets=secrets,
                config_maps=config_maps,
                service_account=self.api.service_account(NAMESPACE),
            )
            for spec in pod["containers"]:
                image = image_for(spec["image"], self.gateway, self.vllm)
                container = Container(
                    pod=pod,
                    spec=spec,
                    image=image,
                    context=context,
                    labels=pod_template_labels(workload),
                    grace_s=float(pod.get("terminationGracePeriodSeconds", 30)),
                )
                if image is self.vllm:
                    # the node's GPU, which the device plugin exposes to the container
                    gpu = required_node_labels(pod).get("igw.dev/gpu", ["H100"])[0]
                    container.extra_env = {vllm_cli.EMULATED_GPU_ENV: gpu}
                self.containers.append(container)

    def pods_of(self, selector: dict[str, str]) -> list[Container]:
        """The first container of each pod whose labels match SELECTOR."""
        pods: dict[str, Container] = {}
        for c in self.containers:
            if all(c.labels.get(k) == v for k, v in selector.items()):
                pods.setdefault(c.context.name, c)
        return list(pods.values())

    def open_gateway(self) -> None:
        """Envoy at the cluster gateways' names the global tier's configs call, when any."""
        hostnames: set[str] = set()
        for container in self.containers:
            argv = container.argv(container.environment())
            if argv[1:2] == ["global"]:
                config = yaml.safe_load(container.mounted_file(argv[argv.index("--config") + 1]))
                hostnames |= {urlsplit(c["endpoint"]).hostname for c in config["clusters"]}
        if not hostnames:
            return
        routes = []
        for path, method, service, port in exact_routes(self.cluster):
            selector, target = service_target(self.cluster, service, port)
            for pod in self.pods_of(selector)[:1]:
                routes.append((path, method, pod.context.pod_ip, pod.port_number(target)))
        self.envoy = EnvoyGateway(self.network.node_ip, sorted(hostnames), routes).start()
        for container in self.containers:
            container.context.hosts = {name: self.network.node_ip for name in hostnames}
            container.context.extra_trust = self.envoy.ca.read_text()

    def start(self, model_servers: bool) -> list[Container]:
        """Start every container of the model-server pods (those with a vLLM container),
        or of the others."""
        with_vllm = {c.context.name for c in self.containers if c.image is self.vllm}
        batch = [c for c in self.containers if (c.context.name in with_vllm) == model_servers]
        for container in batch:
            container.start()
        return batch

    def close(self) -> None:
        for container in self.containers:
            container.stop(grace_s=1.0)
            shutil.rmtree(container.workdir, ignore_errors=True)
            shutil.rmtree(container.context.volume_root, ignore_errors=True)
        if self.envoy is not None:
            self.envoy.stop()


def pools_discovered(run: ClusterRun, picker: Container, timeout_s: float = 20.0) -> None:
    """The picker sees every InferencePool's started model servers as ready pods: found
    through the API (TLS, the service-account token) and scraped across the pod network."""
    expected = {
        pool["metadata"]["name"]: len(run.pods_of(pool["spec"]["selector"]["matchLabels"]))
        for pool in run.cluster.of_kind("InferencePool")
    }
    url = f"http://{picker.context.pod_ip}:{picker.port_number('metrics')}/metrics"
    deadline = time.monotonic() + timeout_s
    seen: dict[str, int] = {}
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url, timeout=2) as answer:
            text = answer.read().decode()
        seen = {
            match[1]: int(float(match[2]))
            for match in re.finditer(
                r'^inference_pool_ready_pods\{name="([^"]+)"\} (\S+)$', text, re.MULTILINE
            )
        }
        if all(seen.get(pool) == count for pool, count in expected.items()):
            return
        time.sleep(0.2)
    raise AssertionError(f"{picker.name}: ready pods per pool {seen}, expected {expected}")


def probe_all(batch: list[Container]) -> tuple[dict[str, Any], list[str]]:
    results: dict[str, Any] = {}
    failures: list[str] = []
    with ThreadPoolExecutor(max_workers=max(1, len(batch))) as pool:
        outcomes = {c: pool.submit(c.await_probes) for c in batch}
    for container, outcome in outcomes.items():
        try:
            results[container.name] = outcome.result()
        except PodStartError as error:
            failures.append(str(error))
    return results, failures


@pytest.mark.slow
@pytest.mark.parametrize(("environment", "region"), CASES)
def test_every_rendered_pod_starts_and_passes_its_probes(
    privileges: None, network: PodNetwork, environment: str, region: str, tmp_path: Path
) -> None:
    gateway = gateway_image()
    images = (gateway, vllm_image(gateway, tmp_path))
    redis = RedisServer(network.node_ip).start()
    api = ApiServerThread(network.node_ip).start()
    cluster = Cluster(
        environment,
        region,
        cluster_objects(environment, region),
        secrets_manager(environment, redis),
    )
    run = ClusterRun(cluster, network, images, redis, api)
    try:
        for obj in cluster.of_kind(*CRD_KINDS):
            api.put(collection(obj), obj)
        run.place()
        run.open_gateway()
        # model servers first: the picker discovers them through the API once ready
        results, failures = probe_all(run.start(model_servers=True))
        ready: dict[str, Container] = {}
        for container in run.containers:
            if container.name in results:
                ready.setdefault(container.context.name, container)
        for name, container in ready.items():
            if all(c.name in results for c in run.containers if c.context.name == name):
                pod = as_pod(name, container.context.pod_ip, dict(container.labels))
                api.put(f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
        more, failed = probe_all(run.start(model_servers=False))
        results.update(more)
        failures += failed
        failures += [
            f"{c.name} exited with {c.process.returncode}; its log:\n{c.log()[-3000:]}"
            for c in run.containers
            if c.name in results and c.process is not None and c.process.poll() is not None
        ]
        assert not failures, "\n\n".join(failures)
        assert results, f"{environment}/{region} renders no workload of a modelled image"
        for picker in run.containers:
            if picker.argv(picker.environment())[1:2] == ["picker"]:
                pools_discovered(run, picker)
        for container in run.containers:
            exit_code = container.stop(grace_s=min(container.grace_s, 20.0))
            assert exit_code in (0, -15, 143), (
                f"{container.name} did not end cleanly on SIGTERM (exit {exit_code}):\n"
                f"{container.log()[-3000:]}"
            )
    finally:
        run.close()
        api.stop()
        redis.stop()
    print(json.dumps(results, indent=1))
