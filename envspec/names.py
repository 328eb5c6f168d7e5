"""Names both sides of the stack agree on, importable without aws_cdk (cdk8s uses them)."""

from __future__ import annotations

from envspec.infra import NodeGroupSpec

__all__ = [
    "GPU_PRODUCTS",
    "GPU_TAINT_KEY",
    "KARPENTER_DISCOVERY_TAG",
    "KARPENTER_NAMESPACE",
    "KARPENTER_SERVICE_ACCOUNT",
    "gpu_labels",
    "karpenter_node_role_name",
    "karpenter_queue_name",
    "regional_domain_name",
    "target_group_name",
]

#: GPU profile name -> the value NVIDIA's GPU feature discovery sets as nvidia.com/gpu.product.
GPU_PRODUCTS: dict[str, str] = {
    "H100": "NVIDIA-H100-80GB-HBM3",
    "H200": "NVIDIA-H200",
    "A100": "NVIDIA-A100-SXM4-80GB",
    "A10G": "NVIDIA-A10G",
    "L4": "NVIDIA-L4",
    "L40S": "NVIDIA-L40S",
}
#: Every GPU node carries `nvidia.com/gpu=true:NoSchedule`; the model servers tolerate it.
GPU_TAINT_KEY = "nvidia.com/gpu"
#: Where the Karpenter controller runs (its chart's documented namespace) and as whom.
KARPENTER_NAMESPACE = "kube-system"
KARPENTER_SERVICE_ACCOUNT = "karpenter"
#: The tag on the private subnets that the EC2NodeClasses select (`<tag>: <cluster>`).
KARPENTER_DISCOVERY_TAG = "karpenter.sh/discovery"


def regional_domain_name(domain_name: str, region: str) -> str:
    """`us-west-2.inference.internal.example.com`: one cluster, for the global router."""
    return f"{region}.{domain_name}"


def target_group_name(environment: str) -> str:
    """Envoy's NLB target group's name, the same in every region: created by the CDK
    ingress stack, bound by ARN (the cluster Secret's annotation, patched into the cdk8s
    TargetGroupBinding by the workloads' Application)."""
    return f"igw-{environment}-envoy"[:32]


def gpu_labels(spec: NodeGroupSpec) -> dict[str, str]:
    """Labels of a GPU node group's nodes, managed node group or Karpenter NodePool alike:
    what the model servers' node affinity and the device plugin key on."""
    labels = {
        "igw.dev/node-group": spec.name,
        "igw.dev/gpu": spec.gpu,
        "igw.dev/gpus-per-node": str(spec.gpus_per_node),
    }
    if spec.gpu in GPU_PRODUCTS:
        labels["nvidia.com/gpu.product"] = GPU_PRODUCTS[spec.gpu]
    return labels


def karpenter_node_role_name(cluster_name: str) -> str:
    """The IAM role of Karpenter's nodes: one per cluster name (IAM is global), created in
    the primary region, named in every region's EC2NodeClass."""
    return f"{cluster_name}-karpenter-node"[:64]


def karpenter_queue_name(cluster_name: str) -> str:
    """The interruption queue, one per region under the same name (SQS is regional)."""
    return f"{cluster_name}-karpenter"[:80]
