"""One test per failure mode of issue 16, each against the rendered `gitops/` tree.

Envoy, Envoy Gateway and Argo CD cannot run here, so each rule is the upstream behaviour
the docstring names, checked on the committed manifests (the drift test proves they are
what the charts render). Every test fails on the tree before the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from charts.app import environment_names
from charts.bootstrap import ADDONS, GIE_CRD_GROUPS, GIE_CRDS_APP
from charts.gateway import picker_ext_proc_cluster
from envspec.environment import load_environment

Doc = dict[str, Any]
WAVE = "argocd.argoproj.io/sync-wave"
ENVOY_DEFAULT_MAX_REQUESTS = 1024


def _docs(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _env_docs(gitops_dir: Path, name: str, folder: str = "rendered") -> list[Doc]:
    out: list[Doc] = []
    for path in sorted((gitops_dir / "environments" / name / folder).glob("*.yaml")):
        out += _docs(path)
    return out


def _bootstrap(gitops_dir: Path) -> dict[str, Doc]:
    docs = _docs(gitops_dir / "bootstrap" / "inference-gateway.k8s.yaml")
    return {d["kind"] + "/" + d["metadata"]["name"]: d for d in docs}


def _inference_routes(docs: list[Doc]) -> list[Doc]:
    """The HTTPRoutes that carry inference traffic: all but the `/status` heartbeat."""
    return [
        d
        for d in docs
        if d["kind"] == "HTTPRoute" and not d["metadata"]["name"].endswith("-status-route")
    ]


def test_no_original_dst_cluster_without_a_cluster_provided_lb_in_both_fields(gitops_dir):
    """Envoy rejects an ORIGINAL_DST cluster whose LB is not cluster-provided, and Envoy
    Gateway v1.5 sets `load_balancing_policy` (which Envoy prefers over `lb_policy`) on
    every cluster: a patch must clear it, as Envoy AI Gateway v0.4 does
    (`internal/extensionserver/post_cluster_modify.go`, `LoadBalancingPolicy = nil`).
    The tree routes through that code (InferencePool backendRefs); any patch policy left
    must set both fields."""
    for name in environment_names():
        for doc in _env_docs(gitops_dir, name):
            if doc["kind"] != "EnvoyPatchPolicy":
                continue
            by_cluster: dict[str, dict[str, Doc]] = {}
            for patch in doc["spec"]["jsonPatches"]:
                by_cluster.setdefault(patch["name"], {})[patch["operation"]["path"]] = patch[
                    "operation"
                ]
            for cluster, ops in by_cluster.items():
                if ops.get("/type", {}).get("value") != "ORIGINAL_DST":
                    continue
                assert ops.get("/lb_policy", {}).get("value") == "CLUSTER_PROVIDED", cluster
                assert ops.get("/load_balancing_policy", {}).get("op") == "remove", cluster
        for route in _inference_routes(_env_docs(gitops_dir, name)):
            for rule in route["spec"]["rules"]:
                assert [(b["group"], b["kind"]) for b in rule["backendRefs"]] == [
                    ("inference.networking.k8s.io", "InferencePool")
                ], route["metadata"]["name"]


def test_no_listener_hostname_behind_the_tls_nlb(gitops_dir):
    """A listener `hostname` makes Envoy Gateway add an SNI `server_names` match to the
    filter chain (Gateway API: hostname is matched against SNI for TLS listeners); the
    NLB re-encrypts to its TLS targets without SNI (ELB docs, "TLS listeners for your
    Network Load Balancer"), so Envoy would answer `filter_chain_not_found`."""
    for name in environment_names():
        for doc in _env_docs(gitops_dir, name):
            if doc["kind"] == "Gateway":
                for listener in doc["spec"]["listeners"]:
                    if listener["protocol"] in ("HTTPS", "TLS"):
                        assert "hostname" not in listener, name


def test_a_device_plugin_reaches_every_gpu_node_class(gitops_dir):
    """Without the NVIDIA device plugin `nvidia.com/gpu` is never advertised on the
    AL2023 NVIDIA AMI nodes (EKS docs, "Use GPU instances": install the device plugin),
    so no model server schedules. The plugin's DaemonSet must select every GPU node
    group's label and tolerate the taint the model servers tolerate."""
    app = _bootstrap(gitops_dir)["Application/nvidia-device-plugin"]["spec"]
    assert app["source"]["chart"] == "nvidia-device-plugin"
    values = yaml.safe_load(app["source"]["helm"]["values"])
    (term,) = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [{"key": "igw.dev/gpu", "operator": "Exists"}]
    for name in environment_names():
        for doc in _env_docs(gitops_dir, name):
            if doc["kind"] != "Deployment":
                continue
            pod = doc["spec"]["template"]["spec"]
            limits = pod["containers"][0]["resources"].get("limits", {})
            if "nvidia.com/gpu" in limits:
                wanted = {tuple(sorted(t.items())) for t in pod["tolerations"]}
                assert wanted <= {tuple(sorted(t.items())) for t in values["tolerations"]}


def test_no_fail_open_with_a_full_duplex_streamed_body(gitops_dir):
    """Envoy Gateway's CRD rejects it (CEL rule on ExtProc, v1.5
    `api/v1alpha1/ext_proc_types.go`: "If FullDuplexStreamed body processing mode is
    used, FailOpen must be false"), transcribed: an ArgoCD sync would fail."""
    for name in environment_names():
        for doc in _env_docs(gitops_dir, name):
            if doc["kind"] != "EnvoyExtensionPolicy":
                continue
            for ext in doc["spec"]["extProc"]:
                mode = ext.get("processingMode", {})
                streamed = any(
                    mode.get(d, {}).get("body") == "FullDuplexStreamed"
                    for d in ("request", "response")
                )
                assert not (streamed and ext.get("failOpen") is True), name


def _crd_groups_by_app(gitops_dir: Path) -> dict[str, tuple[str, int]]:
    """CRD group → (the Application that installs it, its wave)."""
    apps = _bootstrap(gitops_dir)
    out = {
        g: (GIE_CRDS_APP, int(apps[f"Application/{GIE_CRDS_APP}"]["metadata"]["annotations"][WAVE]))
        for g in GIE_CRD_GROUPS
    }
    for addon in ADDONS:
        wave = int(apps[f"Application/{addon.name}"]["metadata"]["annotations"][WAVE])
        out |= {g: (addon.name, wave) for g in addon.crd_groups}
    return out


def test_every_application_with_custom_resources_syncs_after_their_crds(gitops_dir):
    """Argo CD's sync waves order Applications of the root only; a custom resource whose
    CRD is not established fails the dry run (Argo CD docs, "Sync Phases and Waves",
    "Sync Options: SkipDryRunOnMissingResource"). So: each environment Application comes
    after the Application that installs each CRD group it uses, and every custom
    resource carries SkipDryRunOnMissingResource."""
    groups = _crd_groups_by_app(gitops_dir)
    # The AWS Load Balancer Controller is installed by the CDK app, before ArgoCD.
    groups["elbv2.k8s.aws"] = ("the CDK cluster stack", -100)
    apps = _bootstrap(gitops_dir)
    own = {"inference.igw.dev"}  # our CRD, in the same Application at an earlier wave
    for folder, appset in (("rendered", "environments"), ("monitoring", "monitoring")):
        wave = int(
            apps[f"ApplicationSet/inference-gateway-{appset}"]["metadata"]["annotations"][WAVE]
        )
        for name in environment_names():
            for doc in _env_docs(gitops_dir, name, folder):
                group = doc["apiVersion"].rpartition("/")[0]
                if (
                    group in own
                    or "." not in group
                    or (group.endswith("k8s.io") and group not in groups)
                ):
                    continue
                assert group in groups, f"{doc['kind']}: no Application installs {group}"
                installer, installer_wave = groups[group]
                assert installer_wave < wave, f"{doc['kind']} syncs with {installer}"
                options = doc["metadata"]["annotations"]["argocd.argoproj.io/sync-options"]
                assert "SkipDryRunOnMissingResource=true" in options, doc["kind"]


def test_monitors_are_apart_from_the_workloads_and_selected_by_default(gitops_dir):
    """A PodMonitor in the workloads' Application fails its whole dry run on a cluster
    without the Prometheus operator; kube-prometheus-stack selects monitors labelled
    `release: <release>` by default (chart values,
    `serviceMonitorSelectorNilUsesHelmValues: true`)."""
    for name in environment_names():
        kinds = {d["kind"] for d in _env_docs(gitops_dir, name)}
        assert not kinds & {"PodMonitor", "ServiceMonitor"}, name
        monitors = [
            d
            for d in _env_docs(gitops_dir, name, "monitoring")
            if d["kind"] in ("PodMonitor", "ServiceMonitor")
        ]
        assert monitors
        for monitor in monitors:
            assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    app = _bootstrap(gitops_dir)["Application/kube-prometheus-stack"]["spec"]
    assert app["source"]["helm"]["releaseName"] == "kube-prometheus-stack"


def test_circuit_breakers_above_envoys_default_on_route_and_ext_proc_clusters(gitops_dir):
    """Envoy's default circuit breaker allows 1,024 requests per cluster (Envoy docs,
    "Circuit breaking"); each streaming request holds one ext_proc stream for its life.
    Route clusters: BackendTrafficPolicy `circuitBreaker`; the body-based router's
    ext_proc: `backendSettings.circuitBreaker` (Envoy Gateway v1.5 ClusterSettings); the
    picker's ext_proc cluster, built by the AI Gateway hook after Envoy Gateway's own
    patches run (v1.5 `internal/xds/translator/translator.go`), by runtime keys
    `circuit_breakers.<cluster>.<priority>.max_requests` in the bootstrap."""
    for name in environment_names():
        env = load_environment(name)
        docs = _env_docs(gitops_dir, name)
        routes = {d["metadata"]["name"] for d in _inference_routes(docs)}
        (btp,) = [d for d in docs if d["kind"] == "BackendTrafficPolicy"]
        assert {r["name"] for r in btp["spec"]["targetRefs"]} == routes
        assert btp["spec"]["circuitBreaker"]["maxParallelRequests"] > ENVOY_DEFAULT_MAX_REQUESTS
        (policy,) = [d for d in docs if d["kind"] == "EnvoyExtensionPolicy"]
        for ext in policy["spec"]["extProc"]:
            breaker = ext["backendSettings"]["circuitBreaker"]
            assert breaker["maxParallelRequests"] > ENVOY_DEFAULT_MAX_REQUESTS
        (proxy,) = [d for d in docs if d["kind"] == "EnvoyProxy"]
        patches = {p["path"]: p["value"] for p in proxy["spec"]["bootstrap"]["jsonPatches"]}
        for pool in env.gateway.pools:
            cluster = picker_ext_proc_cluster(pool.name, env.kubernetes.namespace)
            key = f"/layered_runtime/layers/0/static_layer/circuit_breakers.{cluster}.default.max_requests"  # noqa: E501
            assert patches[key] > ENVOY_DEFAULT_MAX_REQUESTS


def test_picker_probes_ask_liveness_and_readiness_services(gitops_dir):
    """The endpoint-picker protocol names `liveness` and `readiness` gRPC health
    services (GIE `docs/proposals/004-endpoint-picker-protocol`); startup and liveness
    must not follow readiness, which is NOT_SERVING whenever no pod is fresh (a model
    outage, a scale from zero): the pickers would restart in a loop."""
    for name in environment_names():
        (picker,) = [
            d
            for d in _env_docs(gitops_dir, name)
            if d["kind"] == "Deployment" and d["metadata"]["name"] == "igw-picker"
        ]
        # (beside it, the tokenizer sidecars: cdk8s/charts/tokenizers.py)
        (container,) = [
            c for c in picker["spec"]["template"]["spec"]["containers"] if c["name"] == "picker"
        ]
        assert container["startupProbe"]["grpc"]["service"] == "liveness"
        assert container["livenessProbe"]["grpc"]["service"] == "liveness"
        assert container["readinessProbe"]["grpc"]["service"] == "readiness"
        # The kubelet's gRPC probe speaks plain text (Kubernetes docs, "Configure
        # Liveness, Readiness and Startup Probes": no TLS for gRPC probes), and the ext_proc
        # port serves TLS: every probe asks the separate health port the picker is told
        # to serve (upstream EPP splits `-grpcPort` and `-grpcHealthPort` the same way).
        args = container["args"]
        assert "--tls" in args
        health = int(args[args.index("--grpc-health-port") + 1])
        assert health != int(args[args.index("--grpc-port") + 1])
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert container[probe]["grpc"]["port"] == health, probe
        # The kubelet probes the pod IP (Kubernetes docs: a probe's `host` defaults to
        # the pod IP) and `igw picker` binds loopback unless given --host: without it
        # every probe, Envoy and Prometheus would be refused.
        assert args[args.index("--host") + 1] == "0.0.0.0"


def test_model_servers_give_a_rollout_longer_than_their_startup_probe(gitops_dir):
    """A Deployment whose `progressDeadlineSeconds` (default 600) is below the time the
    startup probe allows reports ProgressDeadlineExceeded while a healthy pod is still
    loading weights (Kubernetes docs, "Deployments: Failed Deployment"); Argo CD then
    marks the Application Degraded."""
    for name in environment_names():
        for doc in _env_docs(gitops_dir, name):
            if doc["kind"] != "Deployment":
                continue
            for container in doc["spec"]["template"]["spec"]["containers"]:
                probe = container.get("startupProbe")  # (a sidecar without one is ready)
                if probe is None:
                    continue
                budget = probe["periodSeconds"] * probe["failureThreshold"]
                assert doc["spec"].get("progressDeadlineSeconds", 600) > budget, doc["metadata"]


def test_model_servers_can_start(gitops_dir):
    """vLLM loads a gated Hugging Face model only with a token (HF docs, gated models),
    and `--lora-modules NAME=PATH` needs a PATH that exists or a Hub id (vLLM docs,
    "LoRA adapters"): every token comes from a Secret synced from Secrets Manager, every
    adapter from a named source."""
    for name in environment_names():
        docs = _env_docs(gitops_dir, name)
        secrets = {d["spec"]["target"]["name"] for d in docs if d["kind"] == "ExternalSecret"}
        for doc in docs:
            if doc["kind"] != "Deployment":
                continue
            labels = doc["spec"]["template"]["metadata"]["labels"]
            if labels.get("app.kubernetes.io/name") != "vllm":  # aggregated and P/D alike
                continue
            pod = doc["spec"]["template"]["spec"]
            (container,) = [c for c in pod["containers"] if c["name"] == "vllm"]
            args = container["args"]
            if not args[0].startswith(("s3://", "/")):
                mounted = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
                assert mounted & secrets, doc["metadata"]["name"]
            if "--lora-modules" in args:
                i = args.index("--lora-modules") + 1
                for module in args[i:]:
                    if module.startswith("--"):
                        break
                    adapter, _, source = module.partition("=")
                    assert source and source != adapter, module


def test_the_gateway_authenticates_before_any_pod(gitops_dir):
    """Envoy Gateway `SecurityPolicy` (v1.5 extAuth to `igw auth`) on every inference
    route, the key file from a Secret External Secrets syncs from Secrets Manager, never
    from environment.yaml, mounted into `igw auth`, whose Service the policy names. Only
    the heartbeat route (`GET /status` to the picker's metrics port, read by `igw global`
    without a credential) is left out: a SecurityPolicy whose
    targetRef is the Gateway applies to every route attached to it (Envoy Gateway docs,
    "Policy Attachment" / SecurityPolicy `targetRefs`: Gateway, HTTPRoute, GRPCRoute)."""
    for name in environment_names():
        env = load_environment(name)
        docs = _env_docs(gitops_dir, name)
        if env.kubernetes.auth is None:
            continue
        (policy,) = [d for d in docs if d["kind"] == "SecurityPolicy"]
        targets = {(r["kind"], r["name"]) for r in policy["spec"]["targetRefs"]}
        inference = {("HTTPRoute", d["metadata"]["name"]) for d in _inference_routes(docs)}
        assert inference and targets == inference
        (status,) = [
            d for d in docs if d["kind"] == "HTTPRoute" and d not in _inference_routes(docs)
        ]
        (rule,) = status["spec"]["rules"]
        assert rule["matches"] == [{"path": {"type": "Exact", "value": "/status"}, "method": "GET"}]
        (backend,) = rule["backendRefs"]
        assert (backend["kind"], backend["name"], backend["port"]) == (
            "Service",
            "igw-picker",
            9090,
        )
        (backend,) = policy["spec"]["extAuth"]["http"]["backendRefs"]
        (service,) = [
            d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == backend["name"]
        ]
        assert backend["port"] in {p["port"] for p in service["spec"]["ports"]}
        (auth,) = [
            d
            for d in docs
            if d["kind"] == "Deployment" and d["metadata"]["name"] == backend["name"]
        ]
        pod = auth["spec"]["template"]["spec"]
        (volume,) = [v for v in pod["volumes"] if "secret" in v]
        synced = {d["spec"]["target"]["name"] for d in docs if d["kind"] == "ExternalSecret"}
        assert volume["secret"]["secretName"] in synced
        assert not [d for d in docs if d["kind"] == "Secret"]


def test_igw_auth_runs_with_the_rendered_arguments(gitops_dir, tmp_path):
    """The rendered `igw auth` arguments parse with the real `igw` parser and build an
    Authenticator that knows the environment's issuer; Envoy reaches it through its
    NetworkPolicy on the port the Service names."""
    import hashlib

    from inference_gateway.cli.auth import authenticator
    from inference_gateway.cli.main import build_parser

    for name in environment_names():
        env = load_environment(name)
        if env.kubernetes.auth is None:
            continue
        docs = _env_docs(gitops_dir, name)
        (auth,) = [
            d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "igw-auth"
        ]
        (container,) = auth["spec"]["template"]["spec"]["containers"]
        args = list(container["args"])
        keys = tmp_path / "keys.yaml"
        keys.write_text(f"keys: [{{client: a, sha256: {hashlib.sha256(b'k').hexdigest()}}}]\n")
        args[args.index("--api-keys") + 1] = str(keys)
        parsed = build_parser(only="auth").parse_args(args)
        built = authenticator(parsed, "igw auth", jwks_url_allowed=True)
        assert built is not None and built.identify("Bearer k") is not None
        if env.kubernetes.auth.jwt is not None:
            assert built.jwt is not None and built.jwt.issuer == env.kubernetes.auth.jwt.issuer
        (port,) = container["ports"]
        (policy,) = [
            d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "igw-auth"
        ]
        (rule,) = policy["spec"]["ingress"]
        assert rule["ports"] == [{"protocol": "TCP", "port": port["containerPort"]}]
