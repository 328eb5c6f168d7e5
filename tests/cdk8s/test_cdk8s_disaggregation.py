"""A P/D pool (issue 25) rendered: two vLLM Deployments by role, one InferencePool over
both, the routing sidecar on decode pods, one ScaledObject per role, and a picker config
the gateway's own parser accepts, with the P/D plugins and profiles.

The environment is dev's with one P/D pool added, synthesised in a temporary tree, for the
cases that mutate it; prod's committed P/D pool (`llama-8b-h100-pd`) is what the tree-wide
checks (schemas, checkov, first sync, schedulability) cover. Conventions checked against
upstream: the role label and the filters' types (llm-d-inference-scheduler
pkg/plugins/filter/pd_role.go), the decider's and handler's parameters
(pkg/plugins/profile/prefix_based_pd_decider.go, pd_profile_handler.go), vLLM's
`--kv-transfer-config` and the decode pod's vLLM on 8200 behind the sidecar on 8000
(llm-d guides/pd-disaggregation modelserver/gpu/vllm/base/patch-decode.yaml,
gaie-pd/values.yaml: InferencePool targetPorts 8000). The flag's JSON is parsed by the
emulator's own reader of vLLM's KVTransferConfig, so a typo in it fails here.
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from charts.app import ENVIRONMENTS_DIR, synth_tree
from envspec.argocd_manifests import PATCHED_KUSTOMIZATION
from envspec.environment import load_environment
from inference_gateway.cli import pd_sidecar
from inference_gateway.cli.main import build_parser
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.emulator.kvtransfer import parse_kv_transfer_config
from inference_gateway.errors import ConfigError
from inference_gateway.frontends.pd_sidecar import PrefillAllowlist

Doc = dict[str, Any]
POOL = "llama-8b-pd"
MODEL = "llama-3.1-8b-pd"
ROLE = "llm-d.ai/role"
SELECTOR = {"app.kubernetes.io/name": "vllm", "igw.dev/pool": POOL}


def _pd_environment() -> dict[str, Any]:
    """dev's environment with a P/D pool of its own model name, on dev's node group."""
    env: dict[str, Any] = yaml.safe_load(
        (ENVIRONMENTS_DIR / "dev" / "environment.yaml").read_text()
    )
    env["gateway"]["pools"].append(
        {"name": POOL, "selector": dict(SELECTOR), "targetPort": 8000, "gpu": "A10G"}
    )
    env["gateway"]["models"].append({"name": MODEL, "pool": POOL})
    env["model_servers"].append(
        {
            "pool": POOL,
            "node_group": "a10g",
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "hf_token_secret_id": "igw/dev/hf-token",
            "served_model_name": MODEL,
            "disaggregation": {
                "prefill": {"min_replicas": 1, "max_replicas": 3},
                "decode": {"min_replicas": 2, "max_replicas": 4},
                "non_cached_tokens": 256,
            },
        }
    )
    return env


def _write(root: Path, env: dict[str, Any]) -> Path:
    path = root / "environments" / "dev" / "environment.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(env, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def pd_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gitops tree rendered from the P/D environment."""
    sources = tmp_path_factory.mktemp("pd-sources")
    _write(sources, _pd_environment())
    out = tmp_path_factory.mktemp("pd-rendered")
    synth_tree(out, environments_dir=sources / "environments")
    return out


@pytest.fixture(scope="module")
def pd_tree(pd_root: Path) -> dict[str, list[Doc]]:
    """Relative path -> objects, of the P/D tree."""
    return {
        str(p.relative_to(pd_root)): [d for d in yaml.safe_load_all(p.read_text()) if d]
        for p in sorted(pd_root.rglob("*.yaml"))
        if p.name != PATCHED_KUSTOMIZATION
    }


def _docs(tree: dict[str, list[Doc]]) -> Iterator[tuple[str, Doc]]:
    for relative, docs in tree.items():
        for doc in docs:
            yield relative, doc


def _one(tree: dict[str, list[Doc]], kind: str, name: str) -> Doc:
    found = [d for _, d in _docs(tree) if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _container(pod: Doc, name: str) -> Doc:
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == name]
    return container


def _flag(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_one_deployment_per_role_and_the_pool_selects_both(pd_tree):
    pool = _one(pd_tree, "InferencePool", POOL)
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    match = pool["spec"]["selector"]["matchLabels"]
    deployments = {
        d["metadata"]["name"]: d
        for _, d in _docs(pd_tree)
        if d["kind"] == "Deployment" and d["spec"]["template"]["metadata"]["labels"].get(ROLE)
    }
    assert sorted(deployments) == [f"{POOL}-decode", f"{POOL}-prefill"]
    selectors = []
    for role in ("prefill", "decode"):
        deployment = deployments[f"{POOL}-{role}"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels[ROLE] == role
        assert match.items() <= labels.items(), f"the pool does not select the {role} pods"
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector.items() <= labels.items()
        selectors.append(selector)
        # autoscaled: KEDA owns the replica count
        assert "replicas" not in deployment["spec"]
    # the two Deployments never adopt each other's pods
    assert selectors[0] != selectors[1]
    prefill_labels = deployments[f"{POOL}-prefill"]["spec"]["template"]["metadata"]["labels"]
    assert not selectors[1].items() <= prefill_labels.items()


def test_decode_pods_run_vllm_on_8200_behind_the_sidecar_on_8000(pd_tree, dev_env):
    pod = _one(pd_tree, "Deployment", f"{POOL}-decode")["spec"]["template"]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["vllm", "pd-sidecar"]
    vllm = _container(pod, "vllm")
    assert _flag(vllm["args"], "--port") == ["8200"]
    assert {"name": "http", "containerPort": 8200, "protocol": "TCP"} in vllm["ports"]
    (transfer,) = _flag(vllm["args"], "--kv-transfer-config")
    config = parse_kv_transfer_config(transfer, "rendered decode pod")
    assert (config.kv_connector, config.kv_role) == ("NixlConnector", "kv_both")
    host = {e["name"]: e for e in vllm["env"]}["VLLM_NIXL_SIDE_CHANNEL_HOST"]
    assert host["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}

    sidecar = _container(pod, "pd-sidecar")
    assert (
        sidecar["image"]
        == _container(_one(pd_tree, "Deployment", "igw-bbr")["spec"]["template"], "bbr")["image"]
    ), "the sidecar is the gateway image"
    args = sidecar["args"]
    assert args[0] == "pd-sidecar"
    assert _flag(args, "--listen") == ["0.0.0.0:8000"]
    assert _flag(args, "--decoder") == ["http://127.0.0.1:8200"]
    assert _flag(args, "--allow-prefill") == [dev_env.cluster.vpc_cidr]
    assert sidecar["ports"] == [{"name": "sidecar", "containerPort": 8000}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert sidecar[probe]["httpGet"] == {"path": "/healthz", "port": "sidecar"}, probe
    # hardened as its pod's vLLM is (charts/workloads.py container_security_context)
    assert sidecar["securityContext"] == vllm["securityContext"]
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    # it drains with vLLM, or a rollout cuts the streams it proxies
    assert sidecar["lifecycle"] == vllm["lifecycle"]
    mounted = {m["name"] for c in pod["spec"]["containers"] for m in c["volumeMounts"]}
    assert mounted <= {v["name"] for v in pod["spec"]["volumes"]}


def test_the_rendered_sidecar_args_are_what_igw_pd_sidecar_accepts(pd_tree, dev_env):
    """The container's args go through the real `igw` parser (an unknown flag would exit
    2 at pod start) and its allowlist parses: the chart and the command cannot drift."""
    pod = _one(pd_tree, "Deployment", f"{POOL}-decode")["spec"]["template"]
    args = build_parser().parse_args(_container(pod, "pd-sidecar")["args"])
    assert args.handler is pd_sidecar.run
    assert pd_sidecar.parse_listen(args.listen) == ("0.0.0.0", 8000)
    allowlist = PrefillAllowlist.parse(args.allow_prefill)
    inside = str(ipaddress.ip_network(dev_env.cluster.vpc_cidr)[10])
    assert allowlist.target(f"{inside}:8000") == (inside, 8000)  # a prefill pod of the VPC


def test_both_roles_mount_the_one_token_secret_of_the_server(pd_tree):
    (secret,) = [
        d["spec"]["target"]["name"]
        for _, d in _docs(pd_tree)
        if d["kind"] == "ExternalSecret" and d["metadata"]["name"].endswith(f"{POOL}-a10g")
    ]
    for role in ("prefill", "decode"):
        pod = _one(pd_tree, "Deployment", f"{POOL}-{role}")["spec"]["template"]["spec"]
        assert {"name": "hf-token", "secret": {"secretName": secret}} in pod["volumes"], role


def test_prefill_pods_run_vllm_alone_on_the_target_port(pd_tree):
    pod = _one(pd_tree, "Deployment", f"{POOL}-prefill")["spec"]["template"]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["vllm"]
    vllm = _container(pod, "vllm")
    assert _flag(vllm["args"], "--port") == ["8000"]
    (transfer,) = _flag(vllm["args"], "--kv-transfer-config")
    assert parse_kv_transfer_config(transfer, "rendered prefill pod").kv_role == "kv_both"


def test_each_role_scales_on_its_own_signal(pd_tree):
    scaled = {
        d["spec"]["scaleTargetRef"]["name"]: d["spec"]
        for _, d in _docs(pd_tree)
        if d["kind"] == "ScaledObject"
    }
    prefill, decode = scaled[f"{POOL}-prefill"], scaled[f"{POOL}-decode"]
    assert (prefill["minReplicaCount"], prefill["maxReplicaCount"]) == (1, 3)
    assert (decode["minReplicaCount"], decode["maxReplicaCount"]) == (2, 4)
    queries = {
        role: [t["metadata"]["query"] for t in spec["triggers"]]
        for role, spec in (("prefill", prefill), ("decode", decode))
    }
    assert queries["prefill"] == [f'sum(vllm:num_requests_waiting{{pool="{POOL}",role="prefill"}})']
    assert f'avg(vllm:kv_cache_usage_perc{{pool="{POOL}",role="decode"}})' in queries["decode"]
    # the series carry the role: the PodMonitor copies llm-d's label onto them
    monitor = _one(pd_tree, "PodMonitor", "vllm")
    relabel = monitor["spec"]["podMetricsEndpoints"][0]["relabelings"]
    assert {
        "sourceLabels": ["__meta_kubernetes_pod_label_llm_d_ai_role"],
        "targetLabel": "role",
    } in (relabel)


def test_the_picker_config_parses_and_routes_the_model_through_the_pd_profiles(pd_tree):
    config_map = _one(pd_tree, "ConfigMap", "igw-picker-config")
    resource = yaml.safe_load(config_map["data"]["config.yaml"])
    spec = parse_config(resource, "rendered picker config")  # the gateway's own parser
    assert (
        spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        == _one(pd_tree, "InferenceGatewayConfig", "igw")["spec"]
    )
    plugins = {p.instance_name: p for p in spec.plugins}
    assert plugins["prefill-filter"].type == "prefill-filter"
    assert plugins["decode-filter"].type == "decode-filter"
    decider = plugins[f"{POOL}-pd-decider"]
    assert (decider.type, decider.parameters) == (
        "prefix-based-pd-decider",
        {"nonCachedTokens": 256},
    )
    handler = plugins[f"{POOL}-pd-profile-handler"]
    assert handler.type == "pd-profile-handler"
    assert handler.parameters == {
        "decodeProfile": f"{POOL}-decode",
        "prefillProfile": f"{POOL}-prefill",
        "deciderPluginName": f"{POOL}-pd-decider",
        "aggregatedProfile": spec.default_profile,  # short prompts: any pod of the pool
    }
    decode = [r.plugin_ref for r in spec.profile(f"{POOL}-decode").plugins]
    prefill = [r.plugin_ref for r in spec.profile(f"{POOL}-prefill").plugins]
    assert decode[0] == "decode-filter" and "kv-cache-utilization-scorer" in decode
    assert prefill[0] == "prefill-filter" and "predicted-ttft-scorer" in prefill
    models = {m.name: m for m in spec.models}
    assert models[MODEL].profile == f"{POOL}-decode"
    assert models["llama-3.1-8b"].profile is None, "the aggregated pool's model is untouched"


def test_the_pools_pods_reach_each_other_for_nixl(pd_tree):
    policy = _one(pd_tree, "NetworkPolicy", f"{POOL}-kv-transfer")["spec"]
    assert policy["podSelector"] == {"matchLabels": SELECTOR}
    assert policy["ingress"] == [{"from": [{"podSelector": {"matchLabels": SELECTOR}}]}]


def test_prod_renders_a_pd_pool_that_the_tree_checks_validate(rendered):
    """A committed environment (prod) runs a P/D pool, so every check that iterates the
    rendered trees covers its objects as the rest: kubernetes-validate strict and the
    CRD schemas (test_cdk8s_validation.py), checkov (tests/gitops/test_gitops_checkov.py),
    the first-sync play and the schedulability test (tests/gitops)."""
    objects = {
        f"{d['kind']}/{d['metadata']['name']}"
        for relative, docs in rendered.items()
        if relative.startswith("environments/prod/rendered/")
        for d in docs
    }
    prod = load_environment("prod")
    (server,) = [s for s in prod.model_servers if s.disaggregation is not None]
    pool = server.pool
    for role in ("prefill", "decode"):
        assert {f"Deployment/{pool}-{role}", f"ScaledObject/{pool}-{role}"} <= objects
    assert f"InferencePool/{pool}" in objects
    decode = next(
        d
        for relative, docs in rendered.items()
        if relative.startswith("environments/prod/rendered/")
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == f"{pool}-decode"
    )
    assert "pd-sidecar" in {c["name"] for c in decode["spec"]["template"]["spec"]["containers"]}


Mutation = Callable[[dict[str, Any]], None]


def _server(env: dict[str, Any]) -> dict[str, Any]:
    server: dict[str, Any] = env["model_servers"][-1]
    return server


def _no_decode(env: dict[str, Any]) -> None:
    del _server(env)["disaggregation"]["decode"]


def _min_above_max(env: dict[str, Any]) -> None:
    _server(env)["disaggregation"]["prefill"] = {"min_replicas": 3, "max_replicas": 2}


def _negative_threshold(env: dict[str, Any]) -> None:
    _server(env)["disaggregation"]["non_cached_tokens"] = -1


def _unknown_role_group(env: dict[str, Any]) -> None:
    _server(env)["disaggregation"]["prefill"]["node_group"] = "h100"


def _second_server_in_the_pool(env: dict[str, Any]) -> None:
    other = copy.deepcopy(_server(env))
    del other["disaggregation"]
    other["node_group"] = "a10g"
    other["pod_labels"] = {"igw.dev/spare": "true"}
    env["model_servers"].append(other)


def _other_target_port(env: dict[str, Any]) -> None:
    env["gateway"]["pools"][-1]["targetPort"] = 8080


def _own_profile(env: dict[str, Any]) -> None:
    env["gateway"]["models"][-1]["profile"] = "throughput"


def _server_wide_autoscaling(env: dict[str, Any]) -> None:
    _server(env)["max_replicas"] = 4


CASES: list[tuple[str, Mutation, str]] = [
    ("no decode role", _no_decode, "model_servers[1].disaggregation.decode: Field required"),
    ("min above max", _min_above_max, "max_replicas (2) is below min_replicas (3)"),
    (
        "negative threshold",
        _negative_threshold,
        "model_servers[1].disaggregation.non_cached_tokens: Input should be greater than or "
        "equal to 0",
    ),
    (
        "unknown role node group",
        _unknown_role_group,
        "model_servers[1].disaggregation.prefill.node_group: unknown node group 'h100'",
    ),
    ("shared pool", _second_server_in_the_pool, "a P/D pool is served by one model server"),
    ("target port", _other_target_port, "its targetPort is the decode pods' sidecar on 8000"),
    ("own profile", _own_profile, "gateway.models[1].profile"),
    ("server-wide autoscaling", _server_wide_autoscaling, "model_servers[1].max_replicas"),
]


@pytest.mark.parametrize(("case", "mutate", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_pd_pool_is_refused_with_its_path(tmp_path, case, mutate, expected):
    env = _pd_environment()
    mutate(env)
    with pytest.raises(ConfigError) as raised:
        load_environment(_write(tmp_path, env))
    problems = raised.value.problems
    assert any(expected in p for p in problems), problems


def test_the_pd_environment_itself_loads(tmp_path):
    """The fixture the cases mutate is valid: each case fails for its own reason."""
    env = load_environment(_write(tmp_path, _pd_environment()))
    assert env.model_servers[-1].disaggregation is not None


def test_the_rendered_config_splits_long_prompts_in_the_real_scheduler(pd_tree):
    """The picker's own Scheduler, built from the rendered ConfigMap, over pods labelled
    as the two rendered Deployments label theirs: a prompt of 4000 tokens (above the
    pool's nonCachedTokens of 256) decodes on a decode pod after a prefill pod; one of
    100 stays aggregated on the decode pod."""
    resource = yaml.safe_load(
        _one(pd_tree, "ConfigMap", "igw-picker-config")["data"]["config.yaml"]
    )
    spec = parse_config(resource, "rendered picker config")
    scheduler = Scheduler(spec)
    profile = {m.name: m.profile for m in spec.models}[MODEL]
    pods = [
        Endpoint(
            f"{role}-{i}",
            f"10.40.0.{10 + i}",
            8000,
            pool=POOL,
            labels=_one(pd_tree, "Deployment", f"{POOL}-{role}")["spec"]["template"]["metadata"][
                "labels"
            ],
            metrics=PodMetrics(),
            stale=False,
            models=frozenset({MODEL}),
        )
        for i, role in enumerate(("prefill", "decode", "prefill", "decode"))
    ]
    long = LLMRequest("long", MODEL, prompt_tokens=4000, profile=profile)
    (decode, *_) = scheduler.schedule(long, pods)
    assert decode.labels[ROLE] == "decode"
    prefill = scheduler.schedule_prefill(long, pods, decode)
    assert prefill and {p.labels[ROLE] for p in prefill} == {"prefill"}
    short = LLMRequest("short", MODEL, prompt_tokens=100, profile=profile)
    (decode, *_) = scheduler.schedule(short, pods)
    assert scheduler.schedule_prefill(short, pods, decode) == []
