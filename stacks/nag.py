"""cdk-nag acknowledgements in one place, each with the reason it is safe.

cdk-nag 3 runs as a CDK policy-validation plugin (`Validations.of(app).add_plugins`) and
takes acknowledgements through CDK's own `Validations.of(construct).acknowledge`, one per
finding: `AwsSolutions-IAM5[Resource::*]` and `AwsSolutions-IAM5[Action::s3:*]` are
separate. `acknowledge` here insists on a written reason and names the finding, so a
reviewer reads each exception next to the code that needs it.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

__all__ = ["acknowledge"]


def acknowledge(
    construct: IConstruct,
    rule: str,
    reason: str,
    *,
    findings: Iterable[str] = (),
) -> None:
    """Acknowledge `AwsSolutions-<rule>` (or each `<rule>[finding]`) on `construct`."""
    if len(reason) < 40:
        raise ValueError(f"AwsSolutions-{rule}: an acknowledgement needs a real reason")
    ids = [f"AwsSolutions-{rule}[{f}]" for f in findings] or [f"AwsSolutions-{rule}"]
    Validations.of(construct).acknowledge(*(Acknowledgment(id=i, reason=reason) for i in ids))
