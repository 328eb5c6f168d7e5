"""What one region's cluster holds of an environment, resolved the way its controllers would.

Argo CD applies `regions/<region>` (a Kustomization over `rendered/`, built here with the
pinned `kubectl kustomize`), `monitoring/` and `global/<region>/` where the global tier runs
(gitops/bootstrap: the ApplicationSets' `path`s). The harness needs from them:

* the workloads and their pod templates;
* ConfigMaps as the API stores them (`data`);
* Secrets as External Secrets Operator v0.x writes them from an `ExternalSecret`:
  each `spec.data[]` item reads `remoteRef.key` (and `.property` of a JSON secret) from
  the store, here `FakeSecretsManager`; with `target.template` (engineVersion v2,
  mergePolicy Replace by default) the Secret holds exactly the rendered `template.data`
  keys plus each `templateFrom` ConfigMap item rendered with `templateAs: Values`
  (external-secrets docs "Advanced Templating v2"). Only the `{{ .key }}` form of Go
  templates is rendered; anything else fails, so a new template feature gets modelled
  before it is trusted.
"""

from __future__ import annotations

import base64
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

ROOT = Path(__file__).resolve().parents[2]
ENVIRONMENTS = ROOT / "gitops" / "environments"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
_PLAIN_REFERENCE = re.compile(r"\{\{\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def render_template(text: str, values: Mapping[str, str]) -> str:
    """ESO's Go template, for the one form the tree uses: `{{ .key }}`."""
    rendered = _PLAIN_REFERENCE.sub(lambda m: values[m[1]], text)
    if "{{" in rendered:
        raise AssertionError(f"template feature not modelled in: {text[:120]!r}")
    return rendered


def regions(environment: str) -> list[str]:
    return sorted(p.name for p in (ENVIRONMENTS / environment / "regions").iterdir())


def cluster_objects(environment: str, region: str) -> list[dict[str, Any]]:
    """Every object Argo CD applies to ENVIRONMENT's cluster in REGION."""
    folder = ENVIRONMENTS / environment
    built = subprocess.run(
        ["kubectl", "kustomize", str(folder / "regions" / region)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    objects = [o for o in yaml.safe_load_all(built) if o]
    for extra in (folder / "monitoring", folder / "global" / region):
        for path in sorted(extra.glob("*.yaml")) if extra.is_dir() else []:
            objects += [o for o in yaml.safe_load_all(path.read_text()) if o and "kind" in o]
    return objects


@dataclass
class FakeSecretsManager:
    """Secrets Manager's contents for the test: a name holds a string or a JSON object."""

    values: dict[str, str | dict[str, str]] = field(default_factory=dict)

    def read(self, key: str, prop: str | None) -> str:
        if key not in self.values:
            raise AssertionError(f"the test's Secrets Manager has no secret {key!r}")
        value = self.values[key]
        if prop is None:
            return value if isinstance(value, str) else orjson.dumps(value).decode()
        if not isinstance(value, dict) or prop not in value:
            raise AssertionError(f"secret {key!r} has no property {prop!r}")
        return value[prop]


@dataclass
class Cluster:
    """One region's objects, indexed, with Secrets resolved through ESO."""

    environment: str
    region: str
    objects: list[dict[str, Any]]
    secrets_manager: FakeSecretsManager

    def of_kind(self, *kinds: str) -> Iterator[dict[str, Any]]:
        return (o for o in self.objects if o.get("kind") in kinds)

    def config_maps(self) -> dict[str, dict[str, str]]:
        return {o["metadata"]["name"]: dict(o.get("data") or {}) for o in self.of_kind("ConfigMap")}

    def secrets(self) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for secret in self.of_kind("Secret"):
            data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
            data.update(secret.get("stringData") or {})
            found[secret["metadata"]["name"]] = data
        config_maps = self.config_maps()
        for external in self.of_kind("ExternalSecret"):
            spec = external["spec"]
            if spec.get("dataFrom"):
                raise AssertionError(f"ExternalSecret {external['metadata']['name']}: dataFrom")
            values = {
                item["secretKey"]: self.secrets_manager.read(
                    item["remoteRef"]["key"], item["remoteRef"].get("property")
                )
                for item in spec.get("data", [])
            }
            target = spec.get("target") or {}
            name = target.get("name") or external["metadata"]["name"]
            template = target.get("template")
            if template is None:
                found[name] = values
                continue
            rendered = {k: render_template(v, values) for k, v in template.get("data", {}).items()}
            for source in template.get("templateFrom", []):
                config_map = config_maps[source["configMap"]["name"]]
                for item in source["configMap"]["items"]:
                    if item.get("templateAs", "Values") != "Values":
                        raise AssertionError(f"templateAs {item['templateAs']} not modelled")
                    rendered[item["key"]] = render_template(config_map[item["key"]], values)
            found[name] = rendered
        return found

    def workloads(self) -> Iterator[dict[str, Any]]:
        return self.of_kind(*WORKLOAD_KINDS)


def pod_template_labels(workload: Mapping[str, Any]) -> dict[str, str]:
    return dict(workload["spec"]["template"]["metadata"].get("labels") or {})


def required_node_labels(pod: Mapping[str, Any]) -> dict[str, list[str]]:
    """The node labels a pod requires (nodeSelector and required node affinity `In`)."""
    needed = {k: [v] for k, v in (pod.get("nodeSelector") or {}).items()}
    affinity = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in affinity.get("nodeSelectorTerms", [])[:1]:
        for expression in term.get("matchExpressions", []):
            if expression["operator"] == "In":
                needed[expression["key"]] = list(expression["values"])
    return needed


def exact_routes(cluster: Cluster) -> list[tuple[str, str | None, str, int]]:
    """The HTTPRoute rules matched by an exact path, as (path, method, Service, port):
    what the gateway in front answers without the picker (the heartbeat `/status`)."""
    found = []
    for route in cluster.of_kind("HTTPRoute"):
        for rule in route["spec"].get("rules", []):
            services = [b for b in rule.get("backendRefs", []) if b.get("kind") == "Service"]
            for match in rule.get("matches", []):
                path = match.get("path") or {}
                if path.get("type") == "Exact" and services:
                    ref = services[0]
                    found.append((path["value"], match.get("method"), ref["name"], ref["port"]))
    return found


def service_target(cluster: Cluster, name: str, port: int) -> tuple[dict[str, str], str | int]:
    """A Service's pod selector and the targetPort behind its PORT."""
    for service in cluster.of_kind("Service"):
        if service["metadata"]["name"] == name:
            for declared in service["spec"]["ports"]:
                if declared["port"] == port:
                    target = declared.get("targetPort", port)
                    return dict(service["spec"]["selector"]), target
    raise AssertionError(f"no Service {name} with port {port}")
