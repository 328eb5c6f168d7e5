"""The rendered picker hashes what the rendered vLLM pods hash, and gets their tokenizer.

Read from the whole rendered tree of every environment: the precise prefix scorer's
parameters must be the model servers' own vLLM settings (`--block-size`,
`--prefix-caching-hash-algo`, `PYTHONHASHSEED`, each adapter's place in `--lora-modules`,
which vLLM v0.11.0 numbers from 1 as the adapter's `lora_int_id`:
`vllm/entrypoints/openai/serving_models.py`, `lora_id_counter`), and every tokenizer
directory the scorer names must be filled by a sidecar of the picker pod from the
model the pods load, at their revision, with their token, and mounted into the picker.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest
import yaml

from charts.picker import PickerChart
from charts.tokenizers import TOKENIZERS_DIR, precise_prefix_parameters
from envspec.environment import EnvironmentSpec
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.registry import build_plugin, validation_context

Doc = dict[str, Any]
TYPE = "precise-prefix-cache-scorer"


def by_environment(rendered: dict[str, list[Doc]]) -> dict[str, dict[str, list[Doc]]]:
    out: dict[str, dict[str, list[Doc]]] = defaultdict(dict)
    for path, docs in rendered.items():
        if "/rendered/" in path:
            env, _, name = path.partition("/rendered/")
            out[env][name] = docs
    return out


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def scorer_parameters(picker_docs: list[Doc]) -> dict[str, Any]:
    (config_map,) = [d for d in picker_docs if d["kind"] == "ConfigMap"]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    (plugin,) = [p for p in config["spec"]["plugins"] if p["type"] == TYPE]
    parameters: dict[str, Any] = plugin["parameters"]
    return parameters


def test_the_scorer_hashes_as_every_rendered_vllm_pod_does(rendered: dict[str, list[Doc]]):
    environments = by_environment(rendered)
    assert {"dev", "prod"} <= {e.split("/")[-1] for e in environments}
    for env, files in environments.items():
        params = scorer_parameters(files["20-picker.k8s.yaml"])
        servers = [d for d in files["60-model-servers.k8s.yaml"] if d["kind"] == "Deployment"]
        assert servers, env
        for deployment in servers:
            (vllm,) = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                       if c["name"] == "vllm"]  # fmt: skip
            args = vllm["args"]
            assert "--enable-prefix-caching" in args
            assert params["blockSize"] == int(flag(args, "--block-size") or 0), env
            assert params["hashAlgo"] == flag(args, "--prefix-caching-hash-algo"), env
            seed = {e["name"]: e.get("value") for e in vllm["env"]}["PYTHONHASHSEED"]
            assert params["hashSeed"] == seed, env
            # the scorer asks each pod's replay ROUTER where vLLM binds it, on a port the pod
            # exposes (the NetworkPolicy's side: test_cdk8s_charts)
            events = json.loads(flag(args, "--kv-events-config") or "{}")
            replay_port = int(events["replay_endpoint"].rsplit(":", 1)[1])
            assert params["replayPort"] == replay_port, env
            ports = {(p["containerPort"], p["protocol"]) for p in vllm["ports"]}
            assert (replay_port, "TCP") in ports, env
            served = flag(args, "--served-model-name")
            assert served in params["models"], env
            modules = args[args.index("--lora-modules") + 1 :] if "--lora-modules" in args else []
            adapters = [m.split("=")[0] for m in modules if "=" in m and not m.startswith("--")]
            for place, adapter in enumerate(adapters, start=1):
                assert params["models"][adapter]["loraId"] == place, (env, adapter)
                assert (
                    params["models"][adapter]["tokenizer"] == params["models"][served]["tokenizer"]
                )


def test_each_tokenizer_directory_is_filled_from_the_pods_model_and_mounted(
    rendered: dict[str, list[Doc]],
):
    for env, files in by_environment(rendered).items():
        params = scorer_parameters(files["20-picker.k8s.yaml"])
        (picker,) = [d for d in files["20-picker.k8s.yaml"] if d["kind"] == "Deployment"]
        pod = picker["spec"]["template"]["spec"]
        main, *sidecars = pod["containers"]
        assert main["name"] == "picker"
        assert {"name": "tokenizers", "mountPath": TOKENIZERS_DIR, "readOnly": True} in main[
            "volumeMounts"
        ]
        fetched = {flag(c["args"], "--dest"): c for c in sidecars}
        volumes = {v["name"]: v for v in pod["volumes"]}
        vllm_by_served = {}
        secrets_of = defaultdict(set)  # the token Secrets of the pods that load a model
        for deployment in files["60-model-servers.k8s.yaml"]:
            if deployment["kind"] == "Deployment":
                spec = deployment["spec"]["template"]["spec"]
                (vllm,) = [c for c in spec["containers"] if c["name"] == "vllm"]
                vllm_by_served[flag(vllm["args"], "--served-model-name")] = vllm
                source = (vllm["args"][0], flag(vllm["args"], "--revision"))
                secrets_of[source] |= {
                    v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v
                }
        for served, vllm in vllm_by_served.items():
            directory = params["models"][served]["tokenizer"]
            sidecar = fetched[directory]
            assert sidecar["args"][:3] == ["tokenizer", "fetch", vllm["args"][0]], env
            assert flag(sidecar["args"], "--revision") == flag(vllm["args"], "--revision")
            assert "--keep-running" in sidecar["args"]
            env_vars = {e["name"]: e["value"] for e in sidecar["env"]}
            assert env_vars["HF_HUB_DISABLE_XET"] == "1"  # no Xet chunk cache on a 64Mi /tmp
            assert sidecar["image"] == main["image"]
            # the model server's own token Secret, optional: the picker never waits for it
            token_file = flag(sidecar["args"], "--token-file")
            assert token_file is not None
            mount = next(
                m for m in sidecar["volumeMounts"] if token_file.startswith(m["mountPath"])
            )
            secret = volumes[mount["name"]]["secret"]
            source = (vllm["args"][0], flag(vllm["args"], "--revision"))
            assert secret["secretName"] in secrets_of[source] and secret["optional"] is True


def test_the_rendered_config_builds_before_any_file_arrives(rendered: dict[str, list[Doc]]):
    """The picker validates and starts its scorer with the directories still empty."""
    for files in by_environment(rendered).values():
        params = scorer_parameters(files["20-picker.k8s.yaml"])
        scorer = build_plugin(TYPE, TYPE, params, validation_context())
        assert not any(s.ready for s in scorer.tokenizers.values() if s.spec != "none")
        (config_map,) = [d for d in files["20-picker.k8s.yaml"] if d["kind"] == "ConfigMap"]
        parse_config(yaml.safe_load(config_map["data"]["config.yaml"]))


def _with_servers(env: EnvironmentSpec, **changes: Any) -> dict[str, Any]:
    data = env.model_dump(mode="json", by_alias=True)
    data["model_servers"][0].update(changes)
    return data


def test_a_pinned_revision_reaches_vllm_and_the_sidecar_and_s3_models_get_none(synth, dev_env):
    revision = "0e9e39f249a16976918f6564b8830bc894c89659"
    env = EnvironmentSpec.model_validate(_with_servers(dev_env, revision=revision))
    (picker,) = [d for d in synth(PickerChart, env) if d["kind"] == "Deployment"]
    _, sidecar = picker["spec"]["template"]["spec"]["containers"]
    assert flag(sidecar["args"], "--revision") == revision
    assert sidecar["args"][sidecar["args"].index("--dest") + 1].endswith("@" + revision)
    s3 = EnvironmentSpec.model_validate(
        _with_servers(dev_env, model="s3://bucket/llama", hf_token_secret_id=None)
    )
    params = precise_prefix_parameters(s3)
    assert params is not None and params["models"]["llama-3.1-8b"] == {"tokenizer": "none"}
    (picker,) = [d for d in synth(PickerChart, s3) if d["kind"] == "Deployment"]
    assert len(picker["spec"]["template"]["spec"]["containers"]) == 1


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"block_size": 32}, "block_size: 32 differs"),
        ({"prefix_caching_hash_algo": "sha256_cbor"}, "prefix_caching_hash_algo"),
        ({"adapters": ["other-lora", "sql-lora"]}, "adapters[1]: 'sql-lora' is adapters[0]"),
    ],
)
def test_servers_that_would_hash_apart_are_refused(dev_env, change, problem):
    """One scorer hashes every pool: a second server of the pool on another node group
    with another block size, algorithm or adapter order is a config error."""
    data = dev_env.model_dump(mode="json", by_alias=True)
    second = {**data["model_servers"][0], "node_group": "a10g-b", **change}
    data["node_groups"].append({**data["node_groups"][0], "name": "a10g-b"})
    data["model_servers"].append(second)
    if "adapters" in change:
        data["gateway"]["models"][0]["adapters"].append("other-lora")
        second["adapter_sources"] = {**second["adapter_sources"], "other-lora": "org/other"}
    with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        EnvironmentSpec.model_validate(data)
