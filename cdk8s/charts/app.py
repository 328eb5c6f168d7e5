"""Synthesis of every environment: charts into `rendered/` (workloads) and `monitoring/`
(Prometheus Operator monitors, a separate Application), ArgoCD into `bootstrap/`, the
upstream GIE CRDs into `crds/`.

`synth_tree(out_root)` renders into a directory tree shaped like `gitops/`; `write_tree`
then replaces the committed files with it. Nothing is written unless every environment
loads, validates and synthesises, so a bad environment never leaves a half-updated tree.
Output is deterministic: one file per chart, fixed names, stale files removed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

# jsii prints a banner about the Node version on every run; the output must stay quiet.
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20,22")

import yaml

from cdk8s import App, Chart, YamlOutputType
from envspec.argocd_manifests import PATCHED_KUSTOMIZATION
from envspec.environment import ENVIRONMENTS_DIR, EnvironmentSpec, load_environment

from .base import region_images
from .bootstrap import BootstrapChart, RootChart
from .certificates import CertificatesChart
from .crds import CrdsChart, GieCrdsChart
from .gateway import GatewayChart
from .global_router import synth_global_routers
from .inference import InferenceChart
from .model_servers import ModelServersChart
from .network import NetworkPoliciesChart
from .node_pools import NodePoolsChart
from .observability import ObservabilityChart
from .picker import PickerChart

__all__ = [
    "CHARTS",
    "FOLDERS",
    "GITOPS_DIR",
    "KUSTOMIZATION",
    "MONITORING_CHARTS",
    "REGIONS_DIR",
    "build_environment",
    "environment_names",
    "region_overlays",
    "synth_tree",
    "write_tree",
]

GITOPS_DIR = ENVIRONMENTS_DIR.parent

# File name (without .k8s.yaml) → chart. The numbers keep `ls` in sync-wave order.
CHARTS: dict[str, type[Chart]] = {
    "00-crds": CrdsChart,
    "05-certificates": CertificatesChart,
    "10-network-policies": NetworkPoliciesChart,
    "15-node-pools": NodePoolsChart,
    "20-picker": PickerChart,
    "30-gateway": GatewayChart,
    "40-inference": InferenceChart,
    "60-model-servers": ModelServersChart,
}
#: Synced by their own Application, after kube-prometheus-stack has installed its CRDs.
MONITORING_CHARTS: dict[str, type[Chart]] = {"50-observability": ObservabilityChart}
#: Environment folder → its charts.
FOLDERS: dict[str, dict[str, type[Chart]]] = {
    "rendered": CHARTS,
    "monitoring": MONITORING_CHARTS,
}


#: Kustomize's file name in `rendered/`; `.yml`, so the manifest globs (`*.yaml`) of the
#: tests, checkov and kubernetes-validate see only Kubernetes objects. The region overlays,
#: which the Application patches (the target group's ARN), must be `kustomization.yaml`
#: (`PATCHED_KUSTOMIZATION`).
KUSTOMIZATION = "kustomization.yml"
#: `<env>/regions/<region>/`: what the ApplicationSet syncs to a cluster of that region.
REGIONS_DIR = "regions"


def region_overlays(env: EnvironmentSpec, rendered: Sequence[str]) -> dict[str, dict[str, object]]:
    """`rendered/kustomization.yml` and one overlay per region of `env`
    (`regions/<region>/kustomization.yaml`), keyed by their path under the environment's
    folder.

    A rendered manifest names the primary region's ECR; the overlay of each other region
    points every such image at that region's own registry (`region_images`), keeping
    tags and digests, so no cluster pulls across regions.
    """
    header = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    out: dict[str, dict[str, object]] = {
        f"rendered/{KUSTOMIZATION}": {**header, "resources": sorted(rendered)}
    }
    for region in env.aws.regions:
        overlay: dict[str, object] = {**header, "resources": ["../../rendered"]}
        images = region_images(env, region)
        if images:
            overlay["images"] = images
        out[f"{REGIONS_DIR}/{region}/{PATCHED_KUSTOMIZATION}"] = overlay
    return out


def environment_names(environments_dir: Path = ENVIRONMENTS_DIR) -> list[str]:
    return sorted(p.parent.name for p in environments_dir.glob("*/environment.yaml"))


def build_environment(
    env: EnvironmentSpec, *, outdir: Path, charts: dict[str, type[Chart]] = CHARTS
) -> App:
    app = App(outdir=str(outdir), yaml_output_type=YamlOutputType.FILE_PER_CHART)
    for name, chart in charts.items():
        chart(app, name, env=env)  # type: ignore[call-arg]
    return app


def synth_tree(
    out_root: Path,
    *,
    environments_dir: Path = ENVIRONMENTS_DIR,
    names: Sequence[str] | None = None,
) -> list[Path]:
    """Render every environment (and the bootstrap) under `out_root`; return the files.

    Every environment is loaded (and so validated) before anything is synthesised.
    """
    names = names or environment_names(environments_dir)
    envs = [load_environment(environments_dir / n / "environment.yaml") for n in names]
    for env in envs:
        for folder, charts in FOLDERS.items():
            outdir = out_root / "environments" / env.name / folder
            build_environment(env, outdir=outdir, charts=charts).synth()
        env_dir = out_root / "environments" / env.name
        rendered = [p.name for p in (env_dir / "rendered").glob("*.yaml")]
        for relative, body in region_overlays(env, rendered).items():
            path = env_dir / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(body, sort_keys=False))
        synth_global_routers(env, out_root)  # environments/<env>/global/<region>/
    crds = App(outdir=str(out_root / "crds"), yaml_output_type=YamlOutputType.FILE_PER_CHART)
    GieCrdsChart(crds, "gateway-api-inference-extension")
    crds.synth()
    for folder, chart in (("bootstrap", BootstrapChart), ("bootstrap/root", RootChart)):
        app = App(outdir=str(out_root / folder), yaml_output_type=YamlOutputType.FILE_PER_CHART)
        chart(app, "root" if chart is RootChart else "inference-gateway", envs=envs)
        app.synth()
    return sorted(p for p in out_root.rglob("*") if p.is_file())


def write_tree(gitops_dir: Path = GITOPS_DIR, *, names: Sequence[str] | None = None) -> list[str]:
    """Synthesise into a temporary tree, then mirror it into `gitops_dir`; list changes."""
    changes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="igw-synth-") as tmp:
        fresh_root = Path(tmp)
        synth_tree(fresh_root, environments_dir=gitops_dir / "environments", names=names)
        fresh_dirs = [
            fresh_root / "bootstrap",
            fresh_root / "bootstrap" / "root",
            fresh_root / "crds",
            *(
                d
                for folder in FOLDERS
                for d in sorted((fresh_root / "environments").glob(f"*/{folder}"))
            ),
            *sorted((fresh_root / "environments").glob(f"*/{REGIONS_DIR}/*")),
            *sorted((fresh_root / "environments").glob("*/global/*")),
        ]
        # A region folder the sources no longer produce (global tier turned off) empties.
        for gone in sorted((gitops_dir / "environments").glob("*/global/*")):
            if not (fresh_root / gone.relative_to(gitops_dir)).is_dir():
                for stale in sorted(gone.glob("*.yaml")):
                    stale.unlink()
                    changes.append(f"deleted {stale}")
        for fresh_dir in fresh_dirs:
            target = gitops_dir / fresh_dir.relative_to(fresh_root)
            target.mkdir(parents=True, exist_ok=True)
            wanted = {p.name for p in _generated_files(fresh_dir)}
            for stale in _generated_files(target):
                if stale.name not in wanted:
                    stale.unlink()
                    changes.append(f"deleted {stale}")
            for name in sorted(wanted):
                new, old = fresh_dir / name, target / name
                if not old.exists() or old.read_bytes() != new.read_bytes():
                    shutil.copyfile(new, old)
                    changes.append(f"wrote {old}")
    return changes


def _generated_files(folder: Path) -> list[Path]:
    return sorted([*folder.glob("*.yaml"), *folder.glob(KUSTOMIZATION)])
