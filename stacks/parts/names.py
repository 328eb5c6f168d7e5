"""Names both sides of the stack agree on, importable without aws_cdk (cdk8s uses them)."""

from __future__ import annotations

__all__ = ["target_group_name"]


def target_group_name(environment: str) -> str:
    """Envoy's NLB target group: created by the CDK ingress stack, bound by the cdk8s
    TargetGroupBinding (`spec.targetGroupName`), the same in every region."""
    return f"igw-{environment}-envoy"[:32]
