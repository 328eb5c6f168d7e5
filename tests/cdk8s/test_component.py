"""The gateway component construct (charts/component.py) on `Testing.synth`: the exact
objects it renders, the parts it leaves out, and typos that fail at synthesis."""

from __future__ import annotations

from typing import Any

import pytest
from chart_app import chart_app

import cdk8s
from charts.base import Wave, labels
from charts.component import GatewayComponent, Pod, Rollout
from charts.kube import KUBERNETES_VERSION, k8s
from envspec.environment import load_environment

Doc = dict[str, Any]
LABELS = labels(name="demo", component="demo")
SELECTOR = {"app.kubernetes.io/name": "demo", "app.kubernetes.io/instance": "demo"}


def _synth(**overrides: Any) -> dict[str, Doc]:
    chart = cdk8s.Chart(chart_app(), "test", disable_resource_name_hashes=True)
    params: dict[str, Any] = {
        "name": "demo",
        "namespace": "igw",
        "labels": LABELS,
        "wave": Wave.CONTROLLERS,
        "pod": Pod(containers=[k8s.Container(name="demo", image="demo:1")]),
        "rollout": Rollout(replicas=2),
        **overrides,
    }
    GatewayComponent(chart, "demo", **params)
    docs = list(cdk8s.Testing.synth(chart))
    kinds = [d["kind"] for d in docs]
    assert len(set(kinds)) == len(kinds), kinds
    return {d["kind"]: d for d in docs}


def test_a_full_component_renders_its_five_objects_with_one_selector():
    port = k8s.ServicePort(name="grpc", port=9000, target_port=k8s.IntOrString.from_string("grpc"))
    envoy = k8s.NetworkPolicyPeer(namespace_selector=k8s.LabelSelector(match_labels={"a": "b"}))
    docs = _synth(
        service_ports=[port],
        min_available=1,
        ingress=[k8s.NetworkPolicyIngressRule(from_=[envoy])],
        checkov_skips={"CKV_K8S_11": "why"},
    )
    assert sorted(docs) == [
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    ]
    for doc in docs.values():
        assert doc["metadata"]["name"] == "demo"
        assert doc["metadata"]["namespace"] == "igw"
        assert doc["metadata"]["labels"] == LABELS
        assert doc["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"] == "0"
    assert docs["ServiceAccount"]["automountServiceAccountToken"] is False
    deployment = docs["Deployment"]
    assert deployment["metadata"]["annotations"]["checkov.io/skip1"] == "CKV_K8S_11=why"
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["revisionHistoryLimit"] == 5
    assert spec["selector"] == {"matchLabels": SELECTOR}
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert spec["template"]["metadata"] == {"labels": LABELS}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "demo"
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert [c["labelSelector"] for c in pod["topologySpreadConstraints"]] == [
        {"matchLabels": SELECTOR}
    ] * 2
    assert pod["containers"] == [{"name": "demo", "image": "demo:1"}]
    assert docs["Service"]["spec"] == {
        "type": "ClusterIP",
        "selector": SELECTOR,
        "ports": [{"name": "grpc", "port": 9000, "targetPort": "grpc"}],
    }
    assert docs["PodDisruptionBudget"]["spec"] == {
        "minAvailable": 1,
        "selector": {"matchLabels": SELECTOR},
    }
    assert docs["NetworkPolicy"]["spec"] == {
        "podSelector": {"matchLabels": SELECTOR},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"a": "b"}}}]}],
    }


def test_a_model_server_shape_leaves_out_what_it_does_not_own():
    """A shared ServiceAccount, no Service (an InferencePool reaches the pods), no own
    policy, an autoscaled count (no `replicas`), one pod at a time, pod labels apart."""
    pod_labels = {**SELECTOR, "igw.dev/pool": "p"}
    docs = _synth(
        pod=Pod(
            containers=[k8s.Container(name="vllm")],
            service_account="vllm",
            labels=pod_labels,
            annotations={"igw.dev/config-sha256": "abc"},
            termination_grace_s=90,
        ),
        rollout=Rollout(replicas=None, max_surge=0, max_unavailable=1, progress_deadline_s=60),
        service_account=False,
        max_unavailable=1,
    )
    assert sorted(docs) == ["Deployment", "PodDisruptionBudget"]
    spec = docs["Deployment"]["spec"]
    assert "replicas" not in spec
    assert spec["progressDeadlineSeconds"] == 60
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert spec["template"]["metadata"] == {
        "labels": pod_labels,
        "annotations": {"igw.dev/config-sha256": "abc"},
    }
    assert spec["template"]["spec"]["serviceAccountName"] == "vllm"
    assert spec["template"]["spec"]["terminationGracePeriodSeconds"] == 90
    assert docs["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1


def test_a_budget_is_one_of_min_available_or_max_unavailable():
    with pytest.raises(ValueError, match="demo: a disruption budget"):
        _synth(min_available=1, max_unavailable=1)


def test_a_misspelt_field_fails_where_it_is_written():
    """Typed objects: a typo is a TypeError when the chart builds it, not a manifest the
    API server would reject (or, for an unknown field, silently drop)."""
    with pytest.raises(TypeError):
        k8s.Container(name="demo", imagePullPolicy="IfNotPresent")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Pod(containers=[], volume=[])  # type: ignore[call-arg]


def test_the_bindings_are_of_the_environments_kubernetes_version():
    """charts/kube.py's classes are generated for one Kubernetes minor version; every
    shipped environment runs that one (bump the bindings with the clusters)."""
    assert k8s.__name__ == f"cdk8s_plus_{KUBERNETES_VERSION.split('.')[1]}.k8s"
    for name in ("dev", "prod"):
        assert load_environment(name).cluster.kubernetes_version == KUBERNETES_VERSION
