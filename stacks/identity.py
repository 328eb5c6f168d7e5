"""IdentityStack: Pod Identity roles of the picker, global router and CloudWatch agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import Stack
from constructs import Construct

from .parts.pod_identity import PodIdentities, PodIdentityProps

__all__ = ["IdentityStack", "IdentityStackProps"]


@dataclass(frozen=True)
class IdentityStackProps:
    identities: PodIdentityProps


class IdentityStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, props: IdentityStackProps, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.identities = PodIdentities(self, "PodIdentities", props.identities)
