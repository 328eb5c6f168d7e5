"""Converting between the managed add-on's InferenceGatewayConfig and ours: exact where
they overlap, every field the target cannot carry named and kept in the `igw.dev/native`
annotation (so native → managed → native is the identity), and `igw convert`'s exit
codes (0 converted, 2 a field it cannot accept, with its path)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_managed_validation import GOOD

from inference_gateway.cli.main import main
from inference_gateway.config.convert import (
    NATIVE_ANNOTATION,
    convert_resource,
    managed_to_native,
)
from inference_gateway.config.managed import parse_managed
from inference_gateway.core.scheduling.config_checks import parse_config, plugin_problems
from inference_gateway.errors import ConfigError


def test_each_managed_field_lands_on_its_native_field() -> None:
    parts = managed_to_native(parse_managed(GOOD))
    assert parts.gateway["pools"] == [
        {
            "name": "qwen",
            "selector": {"app": "vllm-qwen"},
            "targetPort": 8000,
            "engine": "vllm",
            "routeTimeoutS": 300,
        },
        {"name": "small", "selector": {"app": "vllm-qwen"}, "targetPort": 8000},
    ]
    assert parts.gateway["models"] == [
        {
            "name": "Qwen/Qwen2.5-1.5B-Instruct",
            "pool": "qwen",
            "adapters": ["sql"],
            "profile": "scheduler-qwen",  # its weights differ from the other scheduler's
        },
        {"name": "Qwen/Qwen2.5-0.5B-Instruct", "pool": "small"},
    ]
    deployment = parts.deployment
    assert deployment.acm_arn == GOOD["spec"]["tls"]["acmArn"]
    assert deployment.jwt == {
        "issuer": "https://login.example.com",
        "jwks_uri": "https://login.example.com/jwks.json",
        "audiences": ["inference"],
        "required_claims": {"team": "ml"},
    }
    assert (deployment.picker_replicas, deployment.picker_leader_election) == (2, True)
    assert (deployment.bbr_enabled, deployment.bbr_replicas) == (None, 2)  # None: on
    assert deployment.max_request_body_bytes == 1048576


def scorer_weights(spec: Any, profile: str) -> dict[str, float | None]:
    return {r.plugin_ref: r.weight for r in spec.profile(profile).plugins}


def test_each_managed_weight_weighs_one_of_our_scorers() -> None:
    """queue, kvCache, runningRequests, loraAffinity: the upstream scorers of those
    names; prefix: the default profile's prefix scorer (precise where pods publish KV
    events, the approximate index where not); lru: llm-d's no-hit-lru-scorer;
    predictedLatency: our predicted-TTFT scorer. Unnamed scorers keep their weights."""
    spec = parse_config(GOOD)
    assert scorer_weights(spec, "scheduler-qwen") == {
        "predicted-ttft-scorer": 4,
        "precise-prefix-cache-scorer": 3,
        "lora-affinity-scorer": 1,
        "kv-cache-utilization-scorer": 2,
        "queue-scorer": 2,
        "no-hit-lru-scorer": 1,
        "running-requests-size-scorer": 1,
        "max-score-picker": None,
    }
    assert spec.models[1].profile is None  # no weights: the default profile, as it is


def test_the_same_weights_on_every_scheduler_are_the_weights_shortcut() -> None:
    doc = copy.deepcopy(GOOD)
    for s in doc["spec"]["schedulers"]:
        s["weights"] = {"prefix": 0, "queue": 3, "kvCache": 2}
    native, _ = convert_resource(doc, checks=plugin_problems)
    assert native["spec"]["weights"] == {"prefix": 0, "queue": 3, "kvCache": 2}
    assert "schedulingProfiles" not in native["spec"]
    latency = scorer_weights(parse_config(native), "latency")
    assert "precise-prefix-cache-scorer" not in latency  # prefix: 0 turns it off
    assert latency["queue-scorer"] == 3 and latency["kv-cache-utilization-scorer"] == 2


RICH: dict[str, Any] = {
    "apiVersion": "inference.igw.dev/v1alpha1",
    "kind": "InferenceGatewayConfig",
    "metadata": {"name": "igw"},
    "spec": {
        "pools": [
            {
                "name": "chat",
                "selector": {"app": "vllm", "pool": "chat"},
                "targetPort": 8000,
                "engine": "sglang",
                "gpu": "H100",
                "hourlyUsd": 6.88,
                "routeTimeoutS": 120,
            },
            {
                "name": "batch",
                "selector": {
                    "matchLabels": {"app": "vllm"},
                    "matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}],
                },
                "engine": "trtllm",
            },
            {"name": "idle", "selector": {"app": "idle"}},
        ],
        "models": [
            {"name": "llama", "pool": "chat", "adapters": ["sql"]},
            {"name": "llama-batch", "pool": "batch", "profile": "throughput"},
            {"name": "llama-2", "pool": "chat", "defaultBand": "sheddable"},
        ],
        "weights": {"queue": 2, "prefixCache": 1},
        "objectives": [{"name": "critical", "priority": 10}],
        "rateLimits": [{"model": "llama", "requestsPerMinute": 600}],
        "scrape": {"intervalMs": 100},
    },
}


def test_native_to_managed_to_native_is_the_identity_and_names_what_it_cannot_carry() -> None:
    managed, notes = convert_resource(RICH, "managed", "rich.yaml", checks=plugin_problems)
    parse_managed(managed)  # a valid managed resource
    schedulers = managed["spec"]["schedulers"]
    assert [(s["name"], s["modelName"]) for s in schedulers] == [
        ("chat", "llama"),
        ("batch", "llama-batch"),
    ]
    assert schedulers[0]["engineType"] == "sglang" and "engineType" not in schedulers[1]
    assert schedulers[0]["routeTimeout"] == "120s"
    assert schedulers[0]["loraAdapters"] == ["sql"]
    assert schedulers[1]["modelSelector"]["matchExpressions"] == [
        {"key": "pool", "operator": "In", "values": ["b"]}
    ]
    assert "weights" not in schedulers[0]  # prefixCache has no managed name
    named = {note.split(":")[0] for note in notes}
    assert {
        "gateway.pools[0].gpu",
        "gateway.pools[0].hourlyUsd",
        "gateway.pools[1].engine",  # trtllm: the managed engineType is vllm or sglang
        "gateway.pools[2]",  # a pool no model is served from has no scheduler
        "gateway.models[2]",  # a second model of one pool has no scheduler of its own
        "gateway.weights",
        "gateway.objectives",
        "gateway.rateLimits",
        "gateway.scrape",
    } <= named, notes
    back, _ = convert_resource(managed, "native", "managed.yaml", checks=plugin_problems)
    assert back == RICH


def test_a_patch_that_cannot_apply_is_refused_with_its_path() -> None:
    managed, _ = convert_resource(RICH, "managed", checks=plugin_problems)
    annotations = managed["metadata"]["annotations"]
    for text, problem in [
        ("{not json", "not JSON"),
        ('{"op": "add"}', "expected a JSON list of patch operations"),
        ('[{"op": "move", "path": "/gateway"}]', "[0]: an operation is"),
        ('[{"op": "remove", "path": "/gateway/nothing"}]', "/gateway/nothing: no such field"),
    ]:
        annotations[NATIVE_ANNOTATION] = text
        with pytest.raises(ConfigError) as caught:
            convert_resource(managed, "native", "m.yaml", checks=plugin_problems)
        (line,) = caught.value.problems
        assert line.startswith(f"metadata.annotations[{NATIVE_ANNOTATION}]") and problem in line


def test_a_native_check_on_a_converted_scheduler_points_at_the_scheduler() -> None:
    doc = copy.deepcopy(GOOD)
    doc["spec"]["schedulers"][1]["loraAdapters"] = ["sql"]  # scheduler 0 serves it too
    with pytest.raises(ConfigError) as caught:
        parse_config(doc, "m.yaml")
    assert caught.value.problems == [
        "spec.schedulers[1] (models[1].adapters[0]): 'sql' already served by model "
        "'Qwen/Qwen2.5-1.5B-Instruct'"
    ]


def write(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_igw_convert_prints_yaml_names_what_it_drops_and_exits_2_on_a_bad_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    managed = write(tmp_path, "managed.yaml", GOOD)
    assert main(["convert", str(managed)]) == 0
    out, err = capsys.readouterr()
    native = yaml.safe_load(out)
    assert native["apiVersion"] == "inference.igw.dev/v1alpha1"
    assert parse_config(native) == parse_config(GOOD)
    assert "not carried: spec.tls.acmArn" in err  # a deployment setting: environment.yaml's

    assert main(["convert", str(managed), "--to", "managed"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == GOOD

    native_file = write(tmp_path, "native.yaml", RICH)
    assert main(["convert", str(native_file)]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out)["apiVersion"] == "inference.sagemaker.aws.amazon.com/v1alpha1"
    assert "not carried: gateway.objectives: no field of the managed shape holds it" in err

    bad = copy.deepcopy(GOOD)
    bad["spec"]["schedulers"][0]["configMapRef"] = {"name": "x"}
    assert main(["convert", str(write(tmp_path, "bad.yaml", bad))]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "spec.schedulers[0].configMapRef" in err

    assert main(["convert", str(write(tmp_path, "other.yaml", {"clusters": []}))]) == 2
    assert "not an InferenceGatewayConfig" in capsys.readouterr().err


def test_the_annotation_is_json_a_reviewer_can_read() -> None:
    managed, notes = convert_resource(RICH, "managed", checks=plugin_problems)
    ops = json.loads(managed["metadata"]["annotations"][NATIVE_ANNOTATION])
    assert len(ops) == len(notes) and all(op["op"] in ("add", "remove", "replace") for op in ops)
