"""What a pod can request of an EKS node: its allocatable CPU, memory, GPUs and pod slots.

A node's allocatable is its capacity less what the kubelet keeps back. The EKS AMIs
(AL2023, `nodeadm`, which managed node groups and Karpenter's `al2023@` alias both run)
set, in awslabs/amazon-eks-ami `nodeadm/internal/kubelet/config.go` (commit 81fec2e,
tag v20260724; the same rule as AL2's bootstrap.sh before it):

* `maxPods` = ENIs of the default network card × (IPv4 addresses per ENI − 1) + 2
  (`eni_max_pods.go: calculateStandardMaxPods`, from the embedded
  `instance-info.jsonl`, the VPC CNI's eni-max-pods table);
* `kubeReserved.cpu`: 6 % of the first core, 1 % of the second, 0.5 % of the third and
  fourth, 0.25 % of every core above four (`getCPUMillicoresToReserve`);
* `kubeReserved.memory` = 255 Mi + 11 Mi × maxPods (`getMemoryMebibytesToReserve`);
* `evictionHard: memory.available<100Mi` (`defaultKubeletSubConfig`); no systemReserved.

Memory capacity is what the kernel reports, a little under the instance's nominal size;
Karpenter estimates it as nominal × (1 − 7.5 %) (aws/karpenter-provider-aws v1.6.6
`pkg/operator/options/options.go`: `--vm-memory-overhead-percent` default 0.075), and
so does this model. GPUs come from the NVIDIA device plugin (`nvidia.com/gpu`, one per
GPU). Not modelled: the VPC CNI's prefix delegation (on here, `stacks/parts/addons.py`)
lets EKS raise a managed node group's maxPods to 110 on small instances; the AMI's
ENI-based value used here is the smaller (so the pod-slot check is the stricter one).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["INSTANCE_TYPES", "InstanceType", "Resources", "allocatable", "kube_reserved_cpu_m"]

MI = 1024 * 1024
#: Karpenter's default `vmMemoryOverheadPercent` (see the module docstring).
VM_MEMORY_OVERHEAD = 0.075
#: nodeadm's `evictionHard["memory.available"]`.
EVICTION_HARD_MI = 100


@dataclass(frozen=True)
class Resources:
    """What pods request and nodes offer: CPU in millicores, memory in bytes, GPUs, pods."""

    cpu_m: int = 0
    memory: int = 0
    gpu: int = 0
    pods: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_m + other.cpu_m,
            self.memory + other.memory,
            self.gpu + other.gpu,
            self.pods + other.pods,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_m - other.cpu_m,
            self.memory - other.memory,
            self.gpu - other.gpu,
            self.pods - other.pods,
        )

    def fits_in(self, free: Resources) -> bool:
        return (
            self.cpu_m <= free.cpu_m
            and self.memory <= free.memory
            and self.gpu <= free.gpu
            and self.pods <= free.pods
        )

    def short_of(self, free: Resources) -> list[str]:
        """The resources `free` lacks for this request, for messages."""
        out = []
        if self.cpu_m > free.cpu_m:
            out.append(f"cpu {self.cpu_m}m > {free.cpu_m}m free")
        if self.memory > free.memory:
            out.append(f"memory {self.memory // MI}Mi > {free.memory // MI}Mi free")
        if self.gpu > free.gpu:
            out.append(f"nvidia.com/gpu {self.gpu} > {free.gpu} free")
        if self.pods > free.pods:
            out.append("no pod slot free (maxPods)")
        return out

    def __str__(self) -> str:
        text = f"cpu {self.cpu_m}m, memory {self.memory // MI}Mi"
        return text + (f", nvidia.com/gpu {self.gpu}" if self.gpu else "")


@dataclass(frozen=True)
class InstanceType:
    """An EC2 instance type as the kubelet sees it. vCPUs, memory and GPUs: the EC2 User
    Guide's instance-type tables (general purpose: m6i; accelerated computing: g5, p5);
    ENIs and addresses per ENI: amazon-eks-ami `instance-info.jsonl` (commit 81fec2e)."""

    vcpus: int
    memory_gib: int
    enis: int
    ipv4_per_eni: int
    gpus: int = 0

    @property
    def max_pods(self) -> int:
        return self.enis * (self.ipv4_per_eni - 1) + 2


#: The instance types the environments use. A type missing here fails the schedulability
#: test by name: add it with its figures from the sources above.
INSTANCE_TYPES: dict[str, InstanceType] = {
    "m6i.large": InstanceType(vcpus=2, memory_gib=8, enis=3, ipv4_per_eni=10),
    "m6i.xlarge": InstanceType(vcpus=4, memory_gib=16, enis=4, ipv4_per_eni=15),
    "m6i.2xlarge": InstanceType(vcpus=8, memory_gib=32, enis=4, ipv4_per_eni=15),
    "g5.2xlarge": InstanceType(vcpus=8, memory_gib=32, enis=4, ipv4_per_eni=15, gpus=1),
    "p5.48xlarge": InstanceType(vcpus=192, memory_gib=2048, enis=2, ipv4_per_eni=50, gpus=8),
    # HyperPod's ml.p5.48xlarge is a p5.48xlarge running HyperPod's own EKS AMI; its
    # kubelet settings are taken to be the EKS AMI's (not published separately).
    "ml.p5.48xlarge": InstanceType(vcpus=192, memory_gib=2048, enis=2, ipv4_per_eni=50, gpus=8),
}


def kube_reserved_cpu_m(vcpus: int) -> int:
    """nodeadm's `getCPUMillicoresToReserve`: per-range shares in basis points."""
    total = vcpus * 1000
    ranges = [(0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, total, 25)]
    return sum(
        (min(total, end) - start) * bp // 10000 for start, end, bp in ranges if total > start
    )


def allocatable(instance_type: str) -> Resources:
    """Capacity less kube-reserved and the hard eviction threshold."""
    try:
        spec = INSTANCE_TYPES[instance_type]
    except KeyError:
        raise KeyError(
            f"{instance_type}: not in tests/gitops/eks_nodes.py INSTANCE_TYPES; add its "
            "vCPUs, memory, GPUs and ENI figures with their sources"
        ) from None
    capacity_mi = int(spec.memory_gib * 1024 * (1 - VM_MEMORY_OVERHEAD))
    reserved_mi = 255 + 11 * spec.max_pods + EVICTION_HARD_MI
    return Resources(
        cpu_m=spec.vcpus * 1000 - kube_reserved_cpu_m(spec.vcpus),
        memory=(capacity_mi - reserved_mi) * MI,
        gpu=spec.gpus,
        pods=spec.max_pods,
    )
