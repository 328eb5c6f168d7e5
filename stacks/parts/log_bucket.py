"""The regional bucket that receives S3 server access logs and load-balancer access logs."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Construct

from ..nag import acknowledge

__all__ = ["AccessLogBucket"]


class AccessLogBucket(Construct):
    """SSE-S3 (the only encryption NLB log delivery accepts), TLS only, 400-day expiry."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(400))],
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(
            self.bucket,
            "S1",
            "This is the access-log bucket itself; logging it into itself would loop, and "
            "writes to it are already recorded by CloudTrail data events where enabled.",
        )
