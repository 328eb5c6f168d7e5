"""The picker's precise prefix scorer, configured as the model servers hash: its
parameters from environment.yaml, and the sidecars that bring each model's tokenizer.

The scorer predicts a pod's cache only if it hashes what vLLM hashes (DESIGN §3, the
picker's `protocols/vllm/block_hashing.py`): the pods' `--block-size`,
`--prefix-caching-hash-algo`, `PYTHONHASHSEED`, each adapter's LoRA id (its place in
`--lora-modules`, vLLM numbering from 1), and the served model's own tokenizer and chat
template. All but the tokenizer are rendered into the scorer's `parameters` from the
same fields the vLLM command line is rendered from (charts/model_servers.py).

The tokenizer files. A vLLM pod downloads its model from the hub into its own emptyDir
at start; no volume in the cluster holds them for another pod, and the gateway image
must not carry one environment's models. So the picker pod runs, per model source
(model id and revision), a sidecar `igw tokenizer fetch` that copies just the tokenizer
files from the same repository, at the same revision, with the same Hugging Face token
Secret, into an emptyDir the picker container mounts read-only at `TOKENIZERS_DIR`;
the scorer loads them when they appear (`core/scheduling/tokenizer_files.py`) and uses
its approximate index until then. The picker itself never contacts a hub, and nothing
about the files can keep it from starting: the Secret is mounted `optional` (External
Secrets syncs it in the model servers' later wave; the kubelet fills an optional Secret
volume in once the Secret exists) and the sidecar retries until it can download.
Models loaded from `s3://` or a path in the image have no hub copy: their names get
`tokenizer: none` (the approximate index), never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from envspec.environment import EnvironmentSpec
from envspec.workloads import ModelServerSpec

from .base import gateway_image
from .kube import k8s
from .model_servers import KV_HASH_SEED, KV_REPLAY_PORT, hf_token_secret
from .workloads import container_security_context, empty_dir, env_value, mount, resources

__all__ = [
    "SIDECAR_PROBE_SKIPS",
    "TOKENIZERS_DIR",
    "VOLUME",
    "apply_precise_prefix_parameters",
    "picker_mount",
    "precise_prefix_parameters",
    "sidecars",
    "tokenizer_sources",
    "volumes",
]

TYPE = "precise-prefix-cache-scorer"
TOKENIZERS_DIR = "/var/lib/igw/tokenizers"
VOLUME = "tokenizers"
TOKEN_DIR = "/var/run/secrets/huggingface"
#: room for a few models' tokenizer files (Llama 3's tokenizer.json is about 9 MB)
VOLUME_SIZE = "256Mi"
#: checkov's probe checks, for the pod with sidecars (the picker container has all three)
SIDECAR_PROBE_SKIPS = {
    check: f"the tokenizer sidecar serves nothing: a {kind} probe would tie the picker "
    "pod's rollout to the hub answering, which the picker must never depend on"
    for check, kind in (("CKV_K8S_8", "liveness"), ("CKV_K8S_9", "readiness"))
}


@dataclass(frozen=True)
class TokenizerSource:
    """One model repository at one revision, and a Secret with a token that reads it."""

    model: str
    revision: str | None
    secret: str | None

    @property
    def key(self) -> str:
        """Its directory under TOKENIZERS_DIR (the repository id, `/` as `--`)."""
        name = self.model.replace("/", "--") + (f"@{self.revision}" if self.revision else "")
        return re.sub(r"[^A-Za-z0-9._@-]", "_", name)

    @property
    def directory(self) -> str:
        return f"{TOKENIZERS_DIR}/{self.key}"


def _from_hub(server: ModelServerSpec) -> bool:
    return not server.model.startswith(("s3://", "/"))


def _caching(env: EnvironmentSpec) -> list[ModelServerSpec]:
    return [s for s in env.model_servers if s.enable_prefix_caching]


def tokenizer_sources(env: EnvironmentSpec) -> list[TokenizerSource]:
    """The distinct hub sources of the prefix-caching servers, in environment order."""
    out: dict[tuple[str, str | None], TokenizerSource] = {}
    for server in _caching(env):
        if _from_hub(server):
            key = (server.model, server.revision)
            out.setdefault(key, TokenizerSource(*key, hf_token_secret(server)))
    return list(out.values())


def precise_prefix_parameters(env: EnvironmentSpec) -> dict[str, Any] | None:
    """The scorer's parameters (camelCase, as the picker reads them); None without a
    prefix-caching server (the scorer's defaults then stay)."""
    servers = _caching(env)
    if not servers:
        return None
    sources = {(s.model, s.revision): s for s in tokenizer_sources(env)}
    models: dict[str, dict[str, Any]] = {}
    for server in servers:
        source = sources.get((server.model, server.revision))
        tokenizer = source.directory if source is not None else "none"
        models[server.served_name] = {"tokenizer": tokenizer}
        for place, adapter in enumerate(server.adapters, start=1):
            models[adapter] = {"tokenizer": tokenizer, "loraId": place}
    first = servers[0]  # envspec checks that every caching server hashes alike
    return {
        "blockSize": first.block_size,
        "hashAlgo": first.prefix_caching_hash_algo,
        "hashSeed": KV_HASH_SEED,
        "replayPort": KV_REPLAY_PORT,  # the model servers' replay_endpoint
        "tokenizer": "none",  # a model no server here serves: no precise hashes
        "models": models,
    }


def apply_precise_prefix_parameters(spec: dict[str, Any], env: EnvironmentSpec) -> dict[str, Any]:
    """`spec` (the picker config, camelCase) with the rendered parameters on every
    precise prefix scorer; a key environment.yaml sets on the plugin itself wins."""
    rendered = precise_prefix_parameters(env)
    if rendered is not None:
        for plugin in spec.get("plugins", []):
            if plugin.get("type") == TYPE:
                plugin["parameters"] = {**rendered, **(plugin.get("parameters") or {})}
    return spec


def _token_mount(index: int) -> str:
    return f"{TOKEN_DIR}/{index}"


def sidecars(env: EnvironmentSpec) -> list[k8s.Container]:
    """One `igw tokenizer fetch --keep-running` container per source."""
    out = []
    for i, source in enumerate(tokenizer_sources(env)):
        args = ["tokenizer", "fetch", source.model, "--dest", source.directory, "--keep-running"]
        if source.revision:
            args += ["--revision", source.revision]
        mounts = [mount(VOLUME, TOKENIZERS_DIR), mount("tmp", "/tmp")]
        if source.secret:
            args += ["--token-file", f"{_token_mount(i)}/HF_TOKEN"]
            mounts.append(mount(f"hf-token-{i}", _token_mount(i), read_only=True))
        out.append(
            k8s.Container(
                name=f"tokenizer-{i}",
                image=gateway_image(env),
                image_pull_policy="IfNotPresent",
                args=args,
                env=[
                    # the hub client's own state, on the writable scratch volume
                    env_value("HF_HOME", "/tmp/huggingface"),
                    env_value("HF_HUB_DISABLE_TELEMETRY", "1"),
                    # plain HTTP downloads: Xet's chunk cache (gigabytes by default) would
                    # overrun the 64Mi scratch volume, and the kubelet evicts a pod for that
                    env_value("HF_HUB_DISABLE_XET", "1"),
                ],
                resources=resources(
                    requests={"cpu": "10m", "memory": "64Mi"}, limits={"memory": "256Mi"}
                ),
                security_context=container_security_context(),
                volume_mounts=mounts,
            )
        )
    return out


def volumes(env: EnvironmentSpec) -> list[k8s.Volume]:
    """The shared tokenizer directory and each source's token Secret (optional)."""
    sources = tokenizer_sources(env)
    if not sources:
        return []
    return [
        empty_dir(VOLUME, size=VOLUME_SIZE),
        *(
            k8s.Volume(
                name=f"hf-token-{i}",
                secret=k8s.SecretVolumeSource(secret_name=s.secret, optional=True),
            )
            for i, s in enumerate(sources)
            if s.secret
        ),
    ]


def picker_mount(env: EnvironmentSpec) -> list[k8s.VolumeMount]:
    """The picker container's read-only view of the tokenizer directory."""
    if not tokenizer_sources(env):
        return []
    return [mount(VOLUME, TOKENIZERS_DIR, read_only=True)]
