"""Chart unit tests on `Testing.synth` output: the fields that make routing work."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import yaml

from charts.gateway import GatewayChart
from charts.inference import InferenceChart
from charts.model_servers import ModelServersChart, vllm_args
from charts.network import NetworkPoliciesChart
from charts.observability import ObservabilityChart
from charts.picker import PickerChart
from charts.tokenizers import precise_prefix_parameters
from envspec.environment import EnvironmentSpec
from envspec.workloads import ModelServerSpec
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.emulator.vllm_startup import USER_VARIABLES

Doc = dict[str, Any]


def find(docs: list[Doc], kind: str, name: str | None = None) -> list[Doc]:
    return [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(deployment: Doc) -> Doc:
    return deployment["spec"]["template"]["spec"]


def _with(env: EnvironmentSpec, **changes: object) -> EnvironmentSpec:
    """A validated copy of `env` with some top-level sections replaced."""
    data = env.model_dump(mode="json", by_alias=True)
    data.update(changes)
    return EnvironmentSpec.model_validate(data)


class TestExtProcWiring:
    def test_gateway_policy_runs_only_the_body_based_router(self, synth, dev_env):
        """The picker's ext_proc comes with the InferencePool (Envoy AI Gateway builds it);
        a second one here would call the picker twice per request."""
        policy = one(synth(GatewayChart, dev_env), "EnvoyExtensionPolicy", "igw-ext-proc")
        spec = policy["spec"]
        assert spec["targetRefs"] == [
            {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "igw"}
        ]
        (bbr,) = spec["extProc"]
        assert bbr["backendRefs"] == [
            {"group": "", "kind": "Service", "name": "igw-bbr", "port": 9004}
        ]
        assert bbr["processingMode"] == {"request": {"body": "FullDuplexStreamed"}}
        assert bbr["failOpen"] is False

    def test_routes_match_the_model_header_per_pool(self, synth, dev_env):
        docs = synth(GatewayChart, dev_env)
        route = one(docs, "HTTPRoute", "llama-8b-a10g-route")["spec"]
        assert route["parentRefs"] == [{"name": "igw", "sectionName": "https"}]
        (rule,) = route["rules"]
        *by_header, catch_all = rule["matches"]
        headers = [m["headers"][0] for m in by_header]
        header = {"type": "Exact", "name": "X-Gateway-Model-Name"}
        assert headers == [
            {**header, "value": "llama-3.1-8b"},
            {**header, "value": "sql-lora"},  # an adapter keeps its own name in the header
            {**header, "value": "sql-assistant"},  # the canary alias
        ]
        # the catch-all is a match of the first pool's rule, not a second route to it
        assert catch_all == {"path": {"type": "PathPrefix", "value": "/v1"}}
        assert rule["backendRefs"] == [
            {
                "group": "inference.networking.k8s.io",
                "kind": "InferencePool",
                "name": "llama-8b-a10g",
            }
        ]

    @pytest.mark.parametrize("name", ["dev", "prod"])
    def test_each_pool_is_the_backend_of_exactly_one_route_rule(self, synth, name):
        """Envoy AI Gateway v0.4 builds one endpoint-picker cluster per route rule whose
        backend is an InferencePool, every one of them named after the pool
        (`envoy.clusters.endpointpicker_<pool>_<namespace>_ext_proc`,
        internal/extensionserver/inferencepool.go), and never de-duplicates them
        (post_translate_modify.go); Envoy Gateway v1.5 hands that list to its snapshot
        as is. So no pool may back two rules: the catch-all is a match, not a route."""
        from envspec.environment import load_environment

        docs = synth(GatewayChart, load_environment(name))
        rules = [
            (ref["name"], doc["metadata"]["name"])
            for doc in docs
            if doc["kind"] == "HTTPRoute"
            for rule in doc["spec"]["rules"]
            for ref in rule["backendRefs"]
            if ref["kind"] == "InferencePool"
        ]
        pools = [p for p, _ in rules]
        assert len(pools) == len(set(pools)), rules
        catch_alls = [
            route
            for doc in docs
            if doc["kind"] == "HTTPRoute"
            for route in [doc["metadata"]["name"]]
            for rule in doc["spec"]["rules"]
            for match in rule["matches"]
            if match == {"path": {"type": "PathPrefix", "value": "/v1"}}
        ]
        assert len(catch_alls) == 1, catch_alls

    def test_gateway_is_https_behind_an_internal_nlb(self, synth, dev_env):
        docs = synth(GatewayChart, dev_env)
        (listener,) = one(docs, "Gateway", "igw")["spec"]["listeners"]
        assert (listener["protocol"], listener["port"]) == ("HTTPS", 443)
        gateway_class = one(docs, "GatewayClass")["spec"]
        assert gateway_class["parametersRef"]["name"] == one(docs, "EnvoyProxy")["metadata"]["name"]


#: The labels Envoy Gateway v1.5.0 gives the pods of its Envoy Deployment: `EnvoyAppLabel`
#: (`internal/infrastructure/kubernetes/proxy/resource.go`) and the owning gateway's
#: (`internal/gatewayapi/translator.go`: OwningGatewayNameLabel, ...NamespaceLabel).
ENVOY_GATEWAY_POD_LABELS = {
    "app.kubernetes.io/name": "envoy",
    "app.kubernetes.io/component": "proxy",
    "app.kubernetes.io/managed-by": "envoy-gateway",
}


def test_envoy_keeps_a_replica_through_a_drain_and_spreads_over_zones_and_nodes(synth, dev_env):
    """Through the EnvoyProxy's own fields (Envoy Gateway v1.5.0 `api/v1alpha1`):
    `provider.kubernetes.envoyPDB` (KubernetesPodDisruptionBudgetSpec) becomes the
    PodDisruptionBudget of the Envoy Deployment, selecting its pods' stable labels
    (`resource_provider.go: PodDisruptionBudget`), and `envoyDeployment.pod.
    topologySpreadConstraints` is copied onto its pod template (`Deployment`), where the
    spread only counts pods its labelSelector matches: the labels v1.5.0 puts there."""
    docs = synth(GatewayChart, dev_env)
    kubernetes = one(docs, "EnvoyProxy")["spec"]["provider"]["kubernetes"]
    replicas = kubernetes["envoyDeployment"]["replicas"]
    assert kubernetes["envoyPDB"] == {"minAvailable": 1} and replicas >= 2
    gateway = one(docs, "Gateway")["metadata"]
    pod_labels = {
        **ENVOY_GATEWAY_POD_LABELS,
        "gateway.envoyproxy.io/owning-gateway-name": gateway["name"],
        "gateway.envoyproxy.io/owning-gateway-namespace": gateway["namespace"],
    }
    spreads = kubernetes["envoyDeployment"]["pod"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spreads} == {
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    }
    for constraint in spreads:
        selector = constraint["labelSelector"]["matchLabels"]
        assert selector.items() <= pod_labels.items(), selector
        assert "gateway.envoyproxy.io/owning-gateway-name" in selector  # this Gateway's only
        assert constraint["maxSkew"] == 1


class TestOneLoadBalancer:
    """The CDK builds the NLB; the cluster only binds Envoy's pods into its target group."""

    def test_envoy_service_is_cluster_ip_with_a_fixed_name(self, synth, dev_env):
        docs = synth(GatewayChart, dev_env)
        service = one(docs, "EnvoyProxy")["spec"]["provider"]["kubernetes"]["envoyService"]
        assert service == {"name": "igw-envoy", "type": "ClusterIP"}
        text = json.dumps(docs)
        assert "LoadBalancer" not in text.replace("TargetGroupBinding", "")
        assert "service.beta.kubernetes.io/aws-load-balancer" not in text

    @pytest.mark.parametrize("name", ["dev", "prod"])
    def test_target_group_binding_binds_envoys_service(self, synth, name):
        """The target group itself is patched in by ARN at sync time
        (tests/gitops/test_gitops_target_group_arn.py): git holds no ARN."""
        from envspec.environment import load_environment

        env = load_environment(name)
        docs = synth(GatewayChart, env)
        binding = one(docs, "TargetGroupBinding", "igw-envoy")
        assert binding["apiVersion"] == "elbv2.k8s.aws/v1beta1"
        # Beside the Service Envoy Gateway creates, in its own namespace.
        assert binding["metadata"]["namespace"] == env.kubernetes.envoy_gateway_namespace
        assert binding["spec"] == {
            "serviceRef": {"name": "igw-envoy", "port": 443},
            "targetType": "ip",
            "ipAddressType": "ipv4",
        }
        # Envoy Gateway serves listener 443 on container port 10443: the target group's.
        assert env.ingress.target_port == binding["spec"]["serviceRef"]["port"] + 10000


class TestPoolsSelectModelServers:
    def test_every_pool_selects_exactly_its_deployments(self, synth, dev_env):
        pools = find(synth(InferenceChart, dev_env), "InferencePool")
        deployments = find(synth(ModelServersChart, dev_env), "Deployment")
        assert pools and deployments
        for pool in pools:
            selector = pool["spec"]["selector"]["matchLabels"]
            selected = [
                d["metadata"]["name"]
                for d in deployments
                if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
            ]
            expected = [
                d["metadata"]["name"]
                for d in deployments
                if d["metadata"]["labels"]["igw.dev/pool"] == pool["metadata"]["name"]
            ]
            assert selected == expected != []

    def test_pool_points_at_the_picker(self, synth, dev_env):
        pool = one(synth(InferenceChart, dev_env), "InferencePool", "llama-8b-a10g")["spec"]
        assert pool["targetPorts"] == [{"number": 8000}]
        assert pool["endpointPickerRef"] == {
            "group": "",
            "kind": "Service",
            "name": "igw-picker",
            "port": {"number": 9002},
            "failureMode": "FailClose",
        }

    def test_deployment_selector_is_a_subset_of_its_pod_labels(self, synth, dev_env):
        for deployment in find(synth(ModelServersChart, dev_env), "Deployment"):
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


class TestCanaries:
    def test_rewrite_carries_the_environment_weights(self, synth, dev_env):
        rewrite = one(synth(InferenceChart, dev_env), "InferenceModelRewrite", "sql-assistant")
        assert rewrite["spec"] == {
            "poolRef": {"group": "inference.networking.k8s.io", "name": "llama-8b-a10g"},
            "rules": [
                {
                    "matches": [{"model": {"type": "Exact", "value": "sql-assistant"}}],
                    "targets": [
                        {"modelRewrite": "sql-lora", "weight": 10},
                        {"modelRewrite": "llama-3.1-8b", "weight": 90},
                    ],
                }
            ],
        }

    def test_a_zero_weight_parks_the_target(self, synth, dev_env):
        canary = {
            "name": "sql-assistant",
            "model": "sql-assistant",
            "targets": [{"model": "sql-lora", "weight": 0}, {"model": "llama-3.1-8b", "weight": 5}],
        }
        env = _with(dev_env, canaries=[canary])
        rewrite = one(synth(InferenceChart, env), "InferenceModelRewrite")
        assert rewrite["spec"]["rules"][0]["targets"] == [
            {"modelRewrite": "llama-3.1-8b", "weight": 5}
        ]

    def test_objectives_per_priority_band(self, synth, dev_env):
        objectives = find(synth(InferenceChart, dev_env), "InferenceObjective")
        assert {o["metadata"]["name"]: o["spec"]["priority"] for o in objectives} == {
            "critical-chat": 10,
            "standard": 0,
            "batch": -1,
        }
        assert {o["spec"]["poolRef"]["name"] for o in objectives} == {"llama-8b-a10g"}


class TestModelServers:
    def test_vllm_args_come_from_the_environment(self, synth, dev_env):
        deployment = one(synth(ModelServersChart, dev_env), "Deployment", "vllm-llama-8b-a10g")
        (container,) = pod_spec(deployment)["containers"]
        assert container["command"] == ["vllm", "serve"]
        assert container["args"] == [
            "meta-llama/Llama-3.1-8B-Instruct",
            "--served-model-name", "llama-3.1-8b",
            "--port", "8000",
            "--tensor-parallel-size", "1",
            "--max-model-len", "4096",
            "--gpu-memory-utilization", "0.9",
            "--disable-uvicorn-access-log",
            "--enable-prefix-caching",
            "--kv-events-config",
            '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557",'
            '"replay_endpoint":"tcp://*:5558","topic":"kv-events"}',
            "--block-size", "16", "--prefix-caching-hash-algo", "sha256",
            "--enable-lora", "--max-loras", "2",
            "--lora-modules", "sql-lora=Kawon/llama3.1-food-finetune_v14_r8",
            "--enable-auto-tool-choice", "--tool-call-parser", "llama3_json",
        ]  # fmt: skip
        # vLLM's KV events for the picker's precise prefix scorer: its default port and
        # hash seed (core/scheduling/plugins/precise_prefix.py), the seed vLLM reads
        assert {"name": "PYTHONHASHSEED", "value": "0"} in container["env"]
        assert {"name": "kv-events", "containerPort": 5557, "protocol": "TCP"} in container["ports"]
        assert {"name": "kv-replay", "containerPort": 5558, "protocol": "TCP"} in container["ports"]

    def test_vllm_names_its_user_for_a_uid_without_passwd_entry(self, synth, dev_env):
        """The pod runs as uid 10001, which the vllm/vllm-openai image's /etc/passwd lacks.
        `vllm` imports torch 2.8's inductor, whose cache directory code calls
        getpass.getuser() at import (torch/_inductor/runtime/cache_dir_utils.py
        default_cache_dir, from compiler_bisector.py and, unconditionally, codecache.py):
        with no LOGNAME/USER/LNAME/USERNAME that is pwd.getpwuid's KeyError and the
        container crash-loops (vllm-project/vllm#44548; llm-d/llm-d-benchmark#1573 fixed
        it by setting USER). TORCHINDUCTOR_CACHE_DIR alone does not help (codecache)."""
        deployment = one(synth(ModelServersChart, dev_env), "Deployment", "vllm-llama-8b-a10g")
        spec = pod_spec(deployment)
        (container,) = spec["containers"]
        assert container["securityContext"]["runAsUser"] == 10001
        names = {e["name"]: e.get("value") for e in container["env"]}
        assert any(names.get(name) for name in USER_VARIABLES), names

    def test_flags_follow_the_spec(self):
        server = ModelServerSpec(
            pool="p", node_group="h100", model="org/model", gpus=8, enable_prefix_caching=False
        )
        args = vllm_args(server)
        assert args[:3] == ["org/model", "--served-model-name", "org/model"]
        assert args[args.index("--tensor-parallel-size") + 1] == "8"
        for flag in (
            "--enable-lora",
            "--enable-auto-tool-choice",
            "--enable-prefix-caching",
            "--kv-events-config",
            "--block-size",
            "--prefix-caching-hash-algo",
            "--revision",
        ):
            assert flag not in args

    def test_gpu_scheduling_drain_and_probes(self, synth, dev_env):
        deployment = one(synth(ModelServersChart, dev_env), "Deployment", "vllm-llama-8b-a10g")
        spec = pod_spec(deployment)
        (container,) = spec["containers"]
        assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert spec["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
        term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["nodeSelectorTerms"][0]["matchExpressions"] == [
            {"key": "igw.dev/gpu", "operator": "In", "values": ["A10G"]},
            {"key": "igw.dev/node-group", "operator": "In", "values": ["a10g"]},
        ]
        assert spec["enableServiceLinks"] is False
        shm = next(v for v in spec["volumes"] if v["name"] == "shm")
        assert shm["emptyDir"]["medium"] == "Memory"
        assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
        drain = dev_env.model_servers[0].drain_seconds
        assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": drain}}
        assert spec["terminationGracePeriodSeconds"] > drain

    def test_keda_scales_on_the_gateway_signals_and_replicas_are_left_to_it(self, synth, dev_env):
        """KEDA reads the picker's `inference_pool_saturation` and its queue per pool; no
        HPA on vLLM's own queue (admission keeps that one short on purpose)."""
        docs = synth(ModelServersChart, dev_env)
        deployment = one(docs, "Deployment", "vllm-llama-8b-a10g")
        assert "replicas" not in deployment["spec"]
        assert find(docs, "HorizontalPodAutoscaler") == []
        scaled = one(docs, "ScaledObject", "vllm-llama-8b-a10g")["spec"]
        server = dev_env.model_servers[0]
        assert scaled["scaleTargetRef"]["name"] == "vllm-llama-8b-a10g"
        # dev lets the pool go to zero; the queue trigger wakes it.
        assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (0, server.max_replicas)
        saturation, queue = scaled["triggers"]
        assert 'inference_pool_saturation{name="llama-8b-a10g"}' in saturation["metadata"]["query"]
        assert saturation["metricType"] == "Value"
        query = queue["metadata"]["query"]
        assert 'inference_extension_flow_control_queue_size{name="llama-8b-a10g"}' in query
        assert queue["metadata"]["activationThreshold"] == "0"
        url = "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
        assert {t["metadata"]["serverAddress"] for t in scaled["triggers"]} == {url}

    def test_fixed_replicas_without_max_replicas(self, synth, dev_env):
        server = dev_env.model_servers[0].model_dump(mode="json") | {"max_replicas": None}
        docs = synth(ModelServersChart, _with(dev_env, model_servers=[server]))
        assert one(docs, "Deployment")["spec"]["replicas"] == server["replicas"]
        assert find(docs, "ScaledObject") == []


CHARTS_WITH_PODS = [PickerChart, GatewayChart, ModelServersChart]


@pytest.mark.parametrize("chart", CHARTS_WITH_PODS, ids=lambda c: c.__name__)
def test_pods_are_hardened(synth, dev_env, chart):
    deployments = find(synth(chart, dev_env), "Deployment")
    assert deployments
    for deployment in deployments:
        spec = pod_spec(deployment)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert container["resources"]["requests"] and container["resources"]["limits"]


class TestPicker:
    def test_deployment_runs_the_ext_proc_picker(self, synth, dev_env):
        docs = synth(PickerChart, dev_env)
        deployment = one(docs, "Deployment", "igw-picker")
        assert deployment["spec"]["replicas"] == 2
        container, *_sidecars = pod_spec(deployment)["containers"]
        assert container["args"] == [
            "picker",
            "--host", "0.0.0.0",
            "--grpc-port", "9002",
            "--tls",
            "--grpc-health-port", "9003",
            "--metrics-port", "9090",
            "--config", "/etc/igw/config.yaml",
            "--emf-interval", "60",
            "--emf-cluster", "igw-dev",
            "--drain-timeout", "600",
            "--client-id-from-auth",  # dev has kubernetes.auth: ext_authz sets the header
            "--max-body-bytes", str(4 * 2**20),
        ]  # fmt: skip
        registry = f"{dev_env.aws.account}.dkr.ecr.{dev_env.aws.region}.amazonaws.com"
        assert container["image"] == f"{registry}/igw-dev/gateway:0.1.0"
        assert one(docs, "PodDisruptionBudget", "igw-picker")["spec"]["minAvailable"] == 1

    def test_without_a_security_policy_the_picker_ignores_a_client_id(self, synth, dev_env):
        """No `kubernetes.auth`: no SecurityPolicy sets x-igw-client-id, so a client's
        own would be believed; the picker runs without --client-id-from-auth."""
        env = dev_env.model_copy(
            update={"kubernetes": dev_env.kubernetes.model_copy(update={"auth": None})}
        )
        docs = synth(PickerChart, env)
        containers = pod_spec(one(docs, "Deployment", "igw-picker"))["containers"]
        (container,) = [c for c in containers if c["name"] == "picker"]  # (beside: tokenizers)
        assert "--client-id-from-auth" not in container["args"]
        assert not [d for d in synth(GatewayChart, env) if d["kind"] == "SecurityPolicy"]

    def test_a_rollout_keeps_streams_for_the_route_timeout(self, synth, dev_env):
        """A replaced picker is in every stream it routed until the response ends, so it
        drains for the model routes' request timeout: preStop sleeps while Envoy Gateway
        drops the terminating endpoint, SIGTERM starts `--drain-timeout` (= the route
        timeout), and the kubelet's grace covers both (Kubernetes: the grace period
        counts from the deletion, preStop included; `lifecycle.preStop.sleep` is GA in
        the 1.32 clusters this project builds)."""
        pod = pod_spec(one(synth(PickerChart, dev_env), "Deployment"))
        container, *_sidecars = pod["containers"]
        args = container["args"]
        drain = int(args[args.index("--drain-timeout") + 1])
        routes = [
            r
            for r in find(synth(GatewayChart, dev_env), "HTTPRoute")
            if any(
                b.get("kind") == "InferencePool"
                for rule in r["spec"]["rules"]
                for b in rule["backendRefs"]
            )
        ]
        assert routes
        timeouts = {rule["timeouts"]["request"] for r in routes for rule in r["spec"]["rules"]}
        assert timeouts == {f"{drain}s"}
        sleep = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert sleep >= 1
        assert pod["terminationGracePeriodSeconds"] > sleep + drain

    def test_config_file_is_the_environment_gateway_and_rolls_the_pods(self, synth, dev_env):
        docs = synth(PickerChart, dev_env)
        text = one(docs, "ConfigMap", "igw-picker-config")["data"]["config.yaml"]
        config = yaml.safe_load(text)
        for plugin in config["spec"]["plugins"]:  # hashing as the pods do: test_cdk8s_tokenizers
            if plugin["type"] == "precise-prefix-cache-scorer":
                assert plugin.pop("parameters") == precise_prefix_parameters(dev_env)
        assert parse_config(config) == dev_env.gateway
        template = one(docs, "Deployment")["spec"]["template"]["metadata"]
        expected = hashlib.sha256(text.encode()).hexdigest()[:16]
        assert template["annotations"]["igw.dev/config-sha256"] == expected

    def test_rbac_reads_and_only_writes_events_and_its_status(self, synth, dev_env):
        rules = one(synth(PickerChart, dev_env), "Role", "igw-picker")["rules"]
        writes = [r for r in rules if set(r["verbs"]) - {"get", "list", "watch"}]
        assert writes == [
            {
                "apiGroups": ["inference.igw.dev"],
                "resources": ["inferencegatewayconfigs/status"],
                "verbs": ["get", "patch"],
            },
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        ]
        assert ["pods"] in [rule["resources"] for rule in rules]
        assert all("*" not in rule["resources"] + rule["verbs"] for rule in rules)

    def test_bbr_reads_the_same_config_and_rolls_with_it(self, synth, dev_env):
        picker = one(synth(PickerChart, dev_env), "Deployment", "igw-picker")
        bbr = one(synth(GatewayChart, dev_env), "Deployment", "igw-bbr")
        (container,) = pod_spec(bbr)["containers"]
        assert container["args"] == [
            "bbr",
            # igw bbr binds loopback by default; Envoy reaches it on the pod IP
            "--host",
            "0.0.0.0",
            "--grpc-port",
            "9004",
            "--config",
            "/etc/igw/config.yaml",
            "--max-body-bytes",
            str(dev_env.kubernetes.max_request_body_bytes),
        ]
        # one body limit for both ext_proc servers: a body bbr passes, the picker reads
        (picker_container, *_) = pod_spec(picker)["containers"]
        args = picker_container["args"]
        limit = args[args.index("--max-body-bytes") + 1]
        assert container["args"][-1] == limit
        volumes = {v["name"]: v for v in pod_spec(bbr)["volumes"]}
        assert volumes["config"] == {"name": "config", "configMap": {"name": "igw-picker-config"}}
        hash_key = "igw.dev/config-sha256"
        assert (
            bbr["spec"]["template"]["metadata"]["annotations"][hash_key]
            == picker["spec"]["template"]["metadata"]["annotations"][hash_key]
        )


def test_network_policies_let_only_the_gateway_in(synth, dev_env):
    docs = synth(NetworkPoliciesChart, dev_env)
    deny = one(docs, "NetworkPolicy", "default-deny-ingress")["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": []}
    envoy_ns = {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}}
    models = one(docs, "NetworkPolicy", "model-servers")["spec"]["ingress"]
    sources = models[0]["from"]
    assert sources[0]["namespaceSelector"] == envoy_ns
    assert (
        sources[0]["podSelector"]["matchLabels"]["gateway.envoyproxy.io/owning-gateway-name"]
        == "igw"
    )
    assert sources[1] == {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "igw-picker"}}}
    assert models[0]["ports"] == [{"protocol": "TCP", "port": 8000}]
    kv_ports = [{"protocol": "TCP", "port": 5557}, {"protocol": "TCP", "port": 5558}]
    assert models[2] == {"from": [sources[1]], "ports": kv_ports}  # events and replays
    # each component's own policy comes with it (charts/component.py), selecting its pods
    picker_docs = synth(PickerChart, dev_env)
    picker_policy = one(picker_docs, "NetworkPolicy", "igw-picker")["spec"]
    selector = one(picker_docs, "Deployment", "igw-picker")["spec"]["selector"]
    assert picker_policy["podSelector"] == selector
    picker = picker_policy["ingress"]
    assert [s["namespaceSelector"] for s in picker[0]["from"]] == [envoy_ns]
    assert picker[0]["ports"] == [{"protocol": "TCP", "port": 9002}]
    assert not find(docs, "NetworkPolicy", "igw-picker")


def test_observability_scrapes_vllm_and_dashboards_cover_the_engine_metrics(synth, dev_env):
    docs = synth(ObservabilityChart, dev_env)
    monitor = one(docs, "PodMonitor", "vllm")["spec"]
    pod_labels = find(synth(ModelServersChart, dev_env), "Deployment")[0]["spec"]["template"]
    assert monitor["selector"]["matchLabels"].items() <= pod_labels["metadata"]["labels"].items()
    assert monitor["podMetricsEndpoints"][0]["port"] == "http"
    for level in ("pools", "pods"):
        configmap = one(docs, "ConfigMap", f"igw-dashboard-{level}")
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        dashboard = json.loads(configmap["data"][f"igw-{level}.json"])
        queries = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
        for metric in (
            "vllm:kv_cache_usage_perc",
            "vllm:num_requests_waiting",
            "vllm:num_requests_running",
            "vllm:lora_requests_info",
            "vllm:request_success_total",
            "vllm:time_to_first_token_seconds_bucket",
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
        ):
            assert metric in queries
