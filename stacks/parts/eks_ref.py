"""`eks.Cluster` as the `eks.ICluster` it implements, for `mypy --strict`.

aws-cdk-lib's Python bindings (2.275) mark `Cluster` `@jsii.implements(ICluster)` but
give it no `kubectl_provider_options` property: the TypeScript class passes the optional
interface member as a constructor prop and never redeclares it, so jsii generates no
getter. At run time the object is the ICluster every construct asks for; only mypy's
structural check of the Protocol fails. One cast, here, rather than one per call site.
"""

from __future__ import annotations

from typing import cast

from aws_cdk import aws_eks_v2 as eks

__all__ = ["cluster_ref"]


def cluster_ref(cluster: eks.Cluster) -> eks.ICluster:
    return cast(eks.ICluster, cluster)
