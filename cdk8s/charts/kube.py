"""The typed Kubernetes API the charts build workloads with: one import to move on a
cluster upgrade.

The classes are the ones `cdk8s import k8s@1.32` generates, as the pinned `cdk8s-plus-32`
package ships them (its `k8s` module; requirements/iac-k8s.txt), so no generated code
lives in this repository and the API version is the clusters' (`kubernetes_version`,
envspec/infra.py). Only these L1 classes are used, never cdk8s-plus's own constructs:
those add defaults of their own (resources, security contexts, ports) that the charts
decide themselves (charts/workloads.py).

A typed object renders its fields in the API's order (the generated `toJson_*`
functions), not in the order a chart writes them; a misspelt field or a value of the
wrong type fails at synthesis (a `TypeError` from the struct, an error from `mypy
--strict`) instead of in a validation test.
"""

from __future__ import annotations

from typing import Any, cast

from cdk8s_plus_32 import k8s

__all__ = ["KUBERNETES_VERSION", "k8s", "pod_spec_json"]

#: The Kubernetes version the classes are generated for (the package's name says it).
KUBERNETES_VERSION = "1.32"


def pod_spec_json(spec: k8s.PodSpec) -> dict[str, Any]:
    """`spec` as the API server reads it: for a custom resource that embeds pod fields
    (Envoy Gateway's EnvoyProxy `pod`), so the same typed helpers build those."""
    return cast(dict[str, Any], k8s.KubePod.manifest(spec=spec)["spec"])
