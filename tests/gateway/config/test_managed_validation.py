"""The managed add-on's InferenceGatewayConfig is checked before it is converted: a field
that is unknown, out of its range or that this project cannot honour fails with its
field path, one case per field (docs/managed-gateway.md has the table and the sources).

The managed documentation's own rules are among them: `tls` is required ("Omitting the
field entirely is rejected at admission"), "bbr must be enabled when more than one
scheduler is defined", `lru` is "valid only when scheduler: llm-d", and the schema is
closed ("strict decoding error: unknown field") — AI on SageMaker HyperPod, inference
gateway pages 01, 04 and 05 (awslabs/ai-on-sagemaker-hyperpod, website/docs/
00-eks-orchestration/inference/inference-gateway/)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from inference_gateway.config.managed import parse_managed
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.errors import ConfigError

SCHEDULER: dict[str, Any] = {
    "name": "qwen",
    "modelName": "Qwen/Qwen2.5-1.5B-Instruct",
    "modelSelector": {"matchLabels": {"app": "vllm-qwen"}},
    "targetPort": 8000,
    "scheduler": "llm-d",
}
GOOD: dict[str, Any] = {
    "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
    "kind": "InferenceGatewayConfig",
    "metadata": {"name": "gw"},
    "spec": {
        "bbr": {"enabled": True, "replicas": 2, "maxRequestBodyBytes": 1048576},
        "tls": {"acmArn": "arn:aws:acm:us-east-1:111111111111:certificate/abc-123"},
        "auth": {
            "jwt": {
                "provider": {
                    "issuer": "https://login.example.com",
                    "remoteJWKS": {"uri": "https://login.example.com/jwks.json"},
                    "audiences": ["inference"],
                    "requiredClaims": {"team": "ml"},
                }
            }
        },
        "observability": {"metrics": {"enabled": True}},
        "schedulers": [
            {
                **SCHEDULER,
                "appProtocol": "http",
                "engineType": "vllm",
                "weights": {
                    "queue": 2,
                    "kvCache": 2,
                    "prefix": 3,
                    "lru": 1,
                    "loraAffinity": 1,
                    "runningRequests": 1,
                    "predictedLatency": 4,
                },
                "replicas": 2,
                "loraAdapters": ["sql"],
                "routeTimeout": "5m",
            },
            {**SCHEDULER, "name": "small", "modelName": "Qwen/Qwen2.5-0.5B-Instruct"},
        ],
    },
}


def test_every_field_of_the_managed_shape_is_accepted() -> None:
    config = parse_managed(GOOD, "good.yaml")
    assert [s.name for s in config.spec.schedulers] == ["qwen", "small"]
    parse_config(GOOD, "good.yaml")  # and converts into a valid config of this project


def at(path: str, value: Any) -> dict[str, Any]:
    """GOOD with `value` at the dotted `path` (`spec.schedulers.0.weights.queue`); the
    value `...` removes the field."""
    doc = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node: Any = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is ...:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


S0 = "spec.schedulers.0"

UNKNOWN = [
    ("colour", "colour: Extra inputs are not permitted"),
    ("spec.gateway", "spec.gateway: Extra inputs are not permitted"),
    (f"{S0}.modelNames", "spec.schedulers[0].modelNames: Extra inputs are not permitted"),
    (f"{S0}.weights.speed", "spec.schedulers[0].weights.speed: Extra inputs are not permitted"),
    ("spec.bbr.timeout", "spec.bbr.timeout: Extra inputs are not permitted"),
    ("spec.tls.secretName", "spec.tls.secretName: Extra inputs are not permitted"),
    ("spec.auth.apiKeys", "spec.auth.apiKeys: Extra inputs are not permitted"),
    ("spec.auth.jwt.claims", "spec.auth.jwt.claims: Extra inputs are not permitted"),
    ("spec.auth.jwt.provider.jwks", "spec.auth.jwt.provider.jwks: Extra inputs are not permitted"),
    (
        "spec.auth.jwt.provider.remoteJWKS.cacheDuration",
        "spec.auth.jwt.provider.remoteJWKS.cacheDuration: Extra inputs are not permitted",
    ),
    ("spec.observability.traces", "spec.observability.traces: Extra inputs are not permitted"),
    (
        "spec.observability.metrics.port",
        "spec.observability.metrics.port: Extra inputs are not permitted",
    ),
]


@pytest.mark.parametrize(("path", "problem"), UNKNOWN)
def test_an_unknown_field_is_refused_with_its_path(path: str, problem: str) -> None:
    assert problem in problems(at(path, "x"))


OUT_OF_RANGE = [
    ("apiVersion", "inference.sagemaker.aws.amazon.com/v1", "apiVersion: Input should be"),
    ("kind", "InferencePool", "kind: Input should be 'InferenceGatewayConfig'"),
    ("spec.schedulers", ..., "spec.schedulers: Field required"),
    ("spec.schedulers", [], "spec.schedulers: List should have at least 1 item"),
    (f"{S0}.name", "Qwen_1", "spec.schedulers[0].name: String should match pattern"),
    (f"{S0}.name", "q" * 64, "spec.schedulers[0].name: String should have at most 63"),
    (f"{S0}.modelName", "", "spec.schedulers[0].modelName: String should have at least 1"),
    (f"{S0}.modelName", ..., "spec.schedulers[0].modelName: Field required"),
    (f"{S0}.modelSelector", ..., "spec.schedulers[0].modelSelector: Field required"),
    (
        f"{S0}.modelSelector",
        {"matchLabels": {"bad key!": "x"}},
        "spec.schedulers[0].modelSelector.matchLabels.bad key!",
    ),
    (f"{S0}.targetPort", 0, "spec.schedulers[0].targetPort: Input should be greater than or equal"),
    (f"{S0}.targetPort", 65536, "spec.schedulers[0].targetPort: Input should be less than or equa"),
    (f"{S0}.appProtocol", "grpc", "spec.schedulers[0].appProtocol: Input should be 'http' or"),
    (f"{S0}.scheduler", "vllm-router", "spec.schedulers[0].scheduler: Input should be 'llm-d' or "),
    (f"{S0}.engineType", "trtllm", "spec.schedulers[0].engineType: Input should be 'vllm' or 'sgl"),
    (f"{S0}.weights.queue", -1, "spec.schedulers[0].weights.queue: Input should be greater than o"),
    (f"{S0}.weights.kvCache", -1, "spec.schedulers[0].weights.kvCache: Input should be greater"),
    (f"{S0}.weights.prefix", -1, "spec.schedulers[0].weights.prefix: Input should be greater"),
    (f"{S0}.weights.lru", -1, "spec.schedulers[0].weights.lru: Input should be greater"),
    (f"{S0}.weights.loraAffinity", -1, "spec.schedulers[0].weights.loraAffinity: Input should be"),
    (f"{S0}.weights.runningRequests", -1, "spec.schedulers[0].weights.runningRequests: Input"),
    (f"{S0}.weights.predictedLatency", -1, "spec.schedulers[0].weights.predictedLatency: Input"),
    (f"{S0}.replicas", 0, "spec.schedulers[0].replicas: Input should be greater than or equal to "),
    (f"{S0}.loraAdapters", ["sql", "sql"], "spec.schedulers[0].loraAdapters[1]: duplicate name 's"),
    (f"{S0}.loraAdapters", [""], "spec.schedulers[0].loraAdapters[0]: empty adapter name"),
    (f"{S0}.routeTimeout", "5 minutes", "spec.schedulers[0].routeTimeout: '5 minutes' is not a du"),
    (f"{S0}.routeTimeout", "1500ms", "spec.schedulers[0].routeTimeout: 1500ms is not a whole numb"),
    (f"{S0}.routeTimeout", "0s", "spec.schedulers[0].routeTimeout: 0s is not a whole number of se"),
    ("spec.schedulers.1.name", "qwen", "spec.schedulers[1]: duplicate name 'qwen'"),
    (
        "spec.schedulers.1.modelName",
        "Qwen/Qwen2.5-1.5B-Instruct",
        "spec.schedulers[1].modelName: 'Qwen/Qwen2.5-1.5B-Instruct' is already scheduler 'qwen'",
    ),
    ("spec.schedulers.1.replicas", 3, "spec.schedulers[1].replicas: 3, but schedulers[0] runs 2"),
    ("spec.bbr.enabled", "sometimes", "spec.bbr.enabled: Input should be a valid boolean"),
    ("spec.bbr.replicas", 0, "spec.bbr.replicas: Input should be greater than or equal to 1"),
    ("spec.bbr.maxRequestBodyBytes", 100, "spec.bbr.maxRequestBodyBytes: Input should be greater"),
    ("spec.bbr.maxRequestBodyBytes", 2**30, "spec.bbr.maxRequestBodyBytes: Input should be less"),
    ("spec.tls", ..., "spec.tls: Field required"),
    ("spec.tls.acmArn", "my-cert", "spec.tls.acmArn: String should match pattern"),
    ("spec.auth.jwt.provider.issuer", "http://login", "spec.auth.jwt.provider.issuer: String shou"),
    ("spec.auth.jwt.provider.remoteJWKS", ..., "spec.auth.jwt.provider.remoteJWKS: Field required"),
    ("spec.auth.jwt.provider.remoteJWKS.uri", "file:///k", "spec.auth.jwt.provider.remoteJWKS.uri"),
    ("spec.auth.jwt.provider.audiences", "inference", "spec.auth.jwt.provider.audiences: Input sh"),
    ("spec.auth.jwt.provider.requiredClaims", {"team": 3}, "spec.auth.jwt.provider.requiredClaims"),
    ("spec.observability.metrics.enabled", "yes please", "spec.observability.metrics.enabled: Inp"),
]


@pytest.mark.parametrize(("path", "value", "problem"), OUT_OF_RANGE)
def test_a_value_out_of_range_is_refused_with_its_path(path: str, value: Any, problem: str) -> None:
    found = problems(at(path, value))
    assert any(problem in line for line in found), found


UNSUPPORTED = [
    (f"{S0}.configMapRef", {"name": "epp-config"}, "spec.schedulers[0].configMapRef: set weights "),
    ("spec.schedulers.1.configMapRef", {"name": "epp-config"}, "spec.schedulers[1].configMapRef: "),
    (f"{S0}.logLevel", "debug", "spec.schedulers[0].logLevel: not supported"),
    (f"{S0}.appProtocol", "kubernetes.io/h2c", "spec.schedulers[0].appProtocol: not supported"),
    (f"{S0}.scheduler", "epp", "spec.schedulers[0].weights.lru: valid only with scheduler: llm-d"),
    ("spec.bbr.enabled", False, "spec.bbr.enabled: bbr must be enabled when more than one schedul"),
    ("spec.bbr.defaultBackend", "qwen", "spec.bbr.defaultBackend: not supported"),
    ("spec.observability.metrics.enabled", False, "spec.observability.metrics.enabled: false is n"),
    ("spec.podDefaults", {"nodeSelector": {"a": "b"}}, "spec.podDefaults: not supported"),
]


@pytest.mark.parametrize(("path", "value", "problem"), UNSUPPORTED)
def test_an_unsupported_field_is_refused_with_its_path_and_why(
    path: str, value: Any, problem: str
) -> None:
    found = problems(at(path, value))
    assert any(problem in line for line in found), found


def test_a_problem_inside_an_environment_file_carries_its_prefix() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_managed(at("spec.bbr.replicas", 0), "env.yaml", prefix="gateway.")
    assert caught.value.problems == [
        "gateway.spec.bbr.replicas: Input should be greater than or equal to 1"
    ]


def problems(doc: dict[str, Any]) -> list[str]:
    """Every reader refuses it the same way: `parse_managed` and `parse_config` (which
    `igw serve/picker/validate --config` run on a managed file)."""
    with pytest.raises(ConfigError) as caught:
        parse_managed(doc, "bad.yaml")
    with pytest.raises(ConfigError) as again:
        parse_config(doc, "bad.yaml")
    assert again.value.problems == caught.value.problems
    return caught.value.problems
