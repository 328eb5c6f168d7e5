"""Acknowledgements for what aws_eks_v2 builds on our behalf, each with its reason.

The EKS service role, node roles, the kubectl provider's Lambda functions and the AWS
Load Balancer Controller's role come from aws-cdk-lib; their policies are the ones AWS
documents for those components. Findings are named one by one (cdk-nag 3 has no
prefix match), so a new finding after a CDK upgrade fails synth until it is reviewed.
"""

from __future__ import annotations

import json

from aws_cdk import CfnCondition, Stack
from aws_cdk import aws_eks_v2 as eks
from constructs import IConstruct

from ..nag import acknowledge

__all__ = ["acknowledge_cluster", "acknowledge_nodegroup"]

_MANAGED = "Policy::arn:<AWS::Partition>:iam::aws:policy/"
NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
)

#: Resource patterns of the AWS Load Balancer Controller's IAM policy (aws-cdk-lib copy of
#: the controller's published iam_policy.json).
ALB_CONTROLLER_RESOURCES = (
    "*",
    "arn:<AWS::Partition>:ec2:*:*:security-group/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:targetgroup/*/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:loadbalancer/net/*/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:loadbalancer/app/*/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:listener/net/*/*/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:listener/app/*/*/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:listener-rule/net/*/*/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:listener-rule/app/*/*/*",
)


def acknowledge_nodegroup(nodegroup: IConstruct) -> None:
    acknowledge(
        nodegroup,
        "IAM4",
        "EKS managed node groups require exactly these AWS managed policies on the node "
        "role (kubelet registration, VPC CNI, image pulls); AWS keeps them in step with "
        "the EKS AMIs.",
        findings=[f"{_MANAGED}{p}" for p in NODE_POLICIES],
    )


def _ecr_public_condition(handler: IConstruct) -> str:
    """The finding text of the kubectl handler's conditional ECR Public policy."""
    conditions = [c for c in handler.node.find_all() if isinstance(c, CfnCondition)]
    if len(conditions) != 1:
        return ""
    logical_id = Stack.of(handler).resolve(conditions[0].logical_id)
    value = {
        "Fn::If": [
            logical_id,
            {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly",
                    ],
                ]
            },
            {"Ref": "AWS::NoValue"},
        ]
    }
    return "Policy::" + json.dumps(value, separators=(",", ":"))


def acknowledge_cluster(cluster: eks.Cluster) -> None:
    acknowledge(
        cluster.role,
        "IAM4",
        "AmazonEKSClusterPolicy is the service role policy EKS requires for the control "
        "plane; it cannot be replaced by a customer policy.",
        findings=[f"{_MANAGED}AmazonEKSClusterPolicy"],
    )
    provider = cluster.kubectl_provider
    if provider is not None:
        lambda_policies = [
            f"{_MANAGED}service-role/AWSLambdaBasicExecutionRole",
            f"{_MANAGED}service-role/AWSLambdaVPCAccessExecutionRole",
        ]
        handler = provider.node.find_child("Handler")
        ecr_public = _ecr_public_condition(handler)
        acknowledge(
            handler,
            "IAM4",
            "CDK's kubectl handler runs in the private subnets (private API endpoint): it "
            "needs Lambda's basic and VPC-access execution policies, and pulls Helm charts "
            "published as OCI images, hence ECR read-only.",
            findings=[
                *lambda_policies,
                f"{_MANAGED}AmazonEC2ContainerRegistryReadOnly",
                *([ecr_public] if ecr_public else []),
            ],
        )
        acknowledge(
            handler,
            "L1",
            "The kubectl handler's runtime is chosen by aws-cdk-lib together with the "
            "kubectl layer it ships; upgrading aws-cdk-lib moves it forward.",
        )
        framework = provider.node.find_child("Provider")
        acknowledge(
            framework,
            "IAM4",
            "The custom-resource framework Lambda of CDK's kubectl provider uses Lambda's "
            "standard execution policies and nothing else.",
            findings=lambda_policies,
        )
        acknowledge(
            framework,
            "IAM5",
            "The provider framework may invoke only the kubectl handler function and its "
            "versions (<arn>:*); the wildcard is the version qualifier.",
            findings=[f"Resource::<{_logical_id(handler.node.find_child('Resource'))}.Arn>:*"],
        )
        acknowledge(
            framework,
            "L1",
            "The provider framework's runtime is chosen by aws-cdk-lib; upgrading "
            "aws-cdk-lib moves it forward.",
        )
    controller = cluster.alb_controller
    if controller is not None:
        acknowledge(
            controller,
            "IAM5",
            "The AWS Load Balancer Controller's policy is the one the controller project "
            "publishes: it manages load balancers, target groups and security groups it "
            "creates, whose ARNs are unknown in advance; mutations are conditioned on the "
            "elbv2.k8s.aws/cluster tag in that policy.",
            findings=[f"Resource::{r}" for r in ALB_CONTROLLER_RESOURCES],
        )


def _logical_id(construct: IConstruct) -> str:
    return str(Stack.of(construct).resolve(construct.logical_id))  # type: ignore[attr-defined]
