"""A first-fit-decreasing placement of pods on nodes, with the scheduler's hard rules.

No kube-scheduler runs here, so this is a MODEL of its filter phase (kubernetes
`pkg/scheduler/framework/plugins`, v1.32), enough to answer "does every pod get a node":

* NodeResourcesFit: the sum of a pod's container requests (a limit stands in for a
  missing request; init containers count by their maximum, restartable ones as
  sidecars beside the containers) within the node's allocatable less what is placed,
  one pod slot each (`pods`);
* TaintToleration: every NoSchedule / NoExecute taint tolerated;
* NodeAffinity: `nodeSelector` and the required node-affinity terms (In, NotIn, Exists,
  DoesNotExist, Gt, Lt);
* InterPodAffinity: required pod anti-affinity, both ways (the incoming pod's terms and
  the placed pods'); required pod affinity is refused as unmodelled;
* PodTopologySpread: `DoNotSchedule` constraints (`ScheduleAnyway` only scores), domains
  from the nodes the pod's node affinity admits (nodeAffinityPolicy Honor, nodeTaintsPolicy
  Ignore, the defaults).

DaemonSet pods are placed first, one on every node they select (the DaemonSet controller
does so before any Deployment pod competes, and Karpenter sizes its nodes for them). The
other pods go largest first (GPUs, then CPU, then memory) onto the first node, in the
given node order, that passes every filter. A pod that fits nowhere is reported with
each node group it may run on and what each node of that group lacks. Not modelled:
scoring (where among the feasible nodes a pod lands), preemption, volume topology.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .eks_nodes import Resources

__all__ = ["Node", "Placement", "Pod", "parse_cpu_m", "parse_memory", "pod_requests"]

Obj = dict[str, Any]

_MEMORY_UNITS = {
    "": 1,
    "k": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
}
_QUANTITY = re.compile(r"^([0-9.]+)([A-Za-z]*)$")


def parse_cpu_m(value: str | int | float) -> int:
    """`250m` -> 250, `1` -> 1000, `0.5` -> 500."""
    text = str(value)
    if text.endswith("m"):
        return int(text[:-1])
    return round(float(text) * 1000)


def parse_memory(value: str | int) -> int:
    """`512Mi`, `24Gi`, `1G`, `1000` -> bytes."""
    match = _QUANTITY.match(str(value))
    if match is None or match.group(2) not in _MEMORY_UNITS:
        raise ValueError(f"{value!r} is not a memory quantity")
    return round(float(match.group(1)) * _MEMORY_UNITS[match.group(2)])


def _container(container: Obj) -> Resources:
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    asked = {**limits, **(resources.get("requests") or {})}
    return Resources(
        cpu_m=parse_cpu_m(asked["cpu"]) if "cpu" in asked else 0,
        memory=parse_memory(asked["memory"]) if "memory" in asked else 0,
        gpu=int(asked.get("nvidia.com/gpu", 0)),
    )


def pod_requests(spec: Obj) -> Resources:
    """What the scheduler reserves for a pod (Kubernetes docs, "Resource Management for
    Pods and Containers" and "Sidecar containers": the larger of the app containers plus
    sidecars and the largest init container, plus one pod slot)."""
    total = Resources()
    for container in spec.get("containers", []):
        total = total + _container(container)
    sidecars = Resources()
    peak = Resources()
    for init in spec.get("initContainers", []) or []:
        if init.get("restartPolicy") == "Always":
            sidecars = sidecars + _container(init)
        else:
            one = sidecars + _container(init)
            peak = Resources(
                max(peak.cpu_m, one.cpu_m),
                max(peak.memory, one.memory),
                max(peak.gpu, one.gpu),
            )
    total = total + sidecars
    return Resources(
        max(total.cpu_m, peak.cpu_m),
        max(total.memory, peak.memory),
        max(total.gpu, peak.gpu),
        pods=1,
    )


@dataclass
class Pod:
    owner: str  # `Deployment igw/igw-picker`, for messages
    index: int
    namespace: str
    labels: Mapping[str, str]
    spec: Obj
    requests: Resources

    @classmethod
    def from_template(cls, owner: str, index: int, namespace: str, template: Obj) -> Pod:
        spec = template.get("spec") or {}
        return cls(
            owner=owner,
            index=index,
            namespace=namespace,
            labels=(template.get("metadata") or {}).get("labels") or {},
            spec=spec,
            requests=pod_requests(spec),
        )

    def __str__(self) -> str:
        return f"{self.owner} pod {self.index} ({self.requests})"


@dataclass
class Node:
    name: str
    group: str  # the node group's description, for messages
    labels: Mapping[str, str]
    taints: Sequence[Obj]
    allocatable: Resources
    pods: list[Pod] = field(default_factory=list)
    used: Resources = field(default_factory=Resources)

    @property
    def free(self) -> Resources:
        return self.allocatable - self.used

    def add(self, pod: Pod) -> None:
        self.pods.append(pod)
        self.used = self.used + pod.requests


def _tolerates(tolerations: Iterable[Obj], taint: Obj) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        operator = t.get("operator", "Equal")
        if not t.get("key"):
            if operator == "Exists":
                return True
            continue
        if t["key"] != taint.get("key"):
            continue
        if operator == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _requirement(labels: Mapping[str, str], req: Obj) -> bool:
    key, op, values = req["key"], req["operator"], req.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels:
        number, bound = int(labels[key]), int(values[0])
        return number > bound if op == "Gt" else number < bound
    return False


def _selects(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels + matchExpressions); an empty one selects all."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_requirement(labels, r) for r in selector.get("matchExpressions") or [])


def _node_affinity_admits(spec: Obj, node: Node) -> str | None:
    """nodeSelector and the required node-affinity terms; None when they admit the node."""
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(
        all(_requirement(node.labels, r) for r in term.get("matchExpressions") or [])
        and all(
            _requirement({"metadata.name": node.name}, r) for r in term.get("matchFields") or []
        )
        for term in terms
    ):
        return "required node affinity"
    return None


def _untolerated(spec: Obj, node: Node) -> str | None:
    tolerations = spec.get("tolerations") or []
    for taint in node.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(
            tolerations, taint
        ):
            return f"taint {taint['key']}={taint.get('value', '')}:{taint['effect']}"
    return None


def _anti_terms(pod: Pod) -> list[Obj]:
    affinity = pod.spec.get("affinity") or {}
    if (affinity.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution"):
        raise NotImplementedError(f"{pod.owner}: required pod affinity is not modelled")
    anti = affinity.get("podAntiAffinity") or {}
    return list(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def _term_matches(term: Obj, owner: Pod, other: Pod) -> bool:
    namespaces = term.get("namespaces") or [owner.namespace]
    return other.namespace in namespaces and _selects(term.get("labelSelector"), other.labels)


class Placement:
    """Nodes in the order first fit tries them; pods placed on them as they come."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = list(nodes)
        self.failures: list[str] = []

    def _filters(self, pod: Pod, node: Node) -> str | None:
        """Why `node` cannot take `pod` (None: it can)."""
        reason = _untolerated(pod.spec, node) or _node_affinity_admits(pod.spec, node)
        if reason:
            return reason
        short = pod.requests.short_of(node.free)
        if short:
            return ", ".join(short)
        return self._anti_affinity(pod, node) or self._spread(pod, node)

    def _same_domain(self, node: Node, key: str) -> list[Node]:
        if key not in node.labels:
            return []
        return [n for n in self.nodes if n.labels.get(key) == node.labels[key]]

    def _anti_affinity(self, pod: Pod, node: Node) -> str | None:
        for term in _anti_terms(pod):
            for other_node in self._same_domain(node, term["topologyKey"]):
                for other in other_node.pods:
                    if _term_matches(term, pod, other):
                        return f"pod anti-affinity ({term['topologyKey']}) with {other}"
        for other_node in self.nodes:
            for other in other_node.pods:
                for term in _anti_terms(other):
                    same = other_node.labels.get(term["topologyKey"]) == node.labels.get(
                        term["topologyKey"]
                    )
                    if same and _term_matches(term, other, pod):
                        return f"{other}'s pod anti-affinity ({term['topologyKey']})"
        return None

    def _spread(self, pod: Pod, node: Node) -> str | None:
        for c in pod.spec.get("topologySpreadConstraints") or []:
            if c.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
                continue
            key = c["topologyKey"]
            if key not in node.labels:
                return f"topology spread: node has no {key} label"
            counts: dict[str, int] = {}
            for n in self.nodes:
                if key in n.labels and _node_affinity_admits(pod.spec, n) is None:
                    counts.setdefault(n.labels[key], 0)
                    counts[n.labels[key]] += sum(
                        1
                        for p in n.pods
                        if p.namespace == pod.namespace
                        and _selects(c.get("labelSelector"), p.labels)
                    )
            skew = counts.get(node.labels[key], 0) + 1 - min(counts.values(), default=0)
            if skew > int(c["maxSkew"]):
                return f"topology spread on {key}: skew {skew} > maxSkew {c['maxSkew']}"
        return None

    def place_daemonset(self, pods_for: Iterable[tuple[Node, Pod]]) -> None:
        """One pod per selected node (the caller built them); report those that do not fit."""
        for node, pod in pods_for:
            short = pod.requests.short_of(node.free)
            if short:
                self.failures.append(
                    f"{pod.owner} does not fit node {node.name} of {node.group}: "
                    + ", ".join(short)
                )
            else:
                node.add(pod)

    def daemon_nodes(self, spec: Obj) -> list[Node]:
        """The nodes a DaemonSet's pods go to (its node affinity and tolerations)."""
        return [
            n
            for n in self.nodes
            if _untolerated(spec, n) is None and _node_affinity_admits(spec, n) is None
        ]

    def place(self, pods: Iterable[Pod]) -> None:
        """First fit, largest first; every pod that fits nowhere becomes a failure."""
        ordered = sorted(
            pods, key=lambda p: (p.requests.gpu, p.requests.cpu_m, p.requests.memory), reverse=True
        )
        for pod in ordered:
            reasons: dict[str, list[str]] = {}
            for node in self.nodes:
                reason = self._filters(pod, node)
                if reason is None:
                    node.add(pod)
                    break
                reasons.setdefault(node.group, []).append(f"{node.name}: {reason}")
            else:
                self.failures.append(_unplaced(pod, reasons))


def _unplaced(pod: Pod, reasons: Mapping[str, list[str]]) -> str:
    """Name the pod and the node groups it could run on, with what each node lacks."""
    eligible = {
        group: why
        for group, why in reasons.items()
        if not all(": taint " in w or ": nodeSelector " in w or "node affinity" in w for w in why)
    }
    if not eligible:
        return f"{pod} fits no node group: none admits it ({sorted(reasons)})"
    details = "; ".join(f"group {g}: " + "; ".join(why) for g, why in eligible.items())
    return f"{pod} does not fit: {details}"


def summary(nodes: Sequence[Node]) -> str:
    """One line per node group: nodes used, and requests against allocatable."""
    groups: dict[str, list[Node]] = {}
    for n in nodes:
        groups.setdefault(n.group, []).append(n)
    lines = []
    for group, members in groups.items():
        used = [n for n in members if any(not _is_daemon(p) for p in n.pods)]
        total = sum((n.used for n in members), Resources())
        cap = sum((n.allocatable for n in members), Resources())
        lines.append(
            f"{group}: {len(used)}/{len(members)} nodes hold workload pods; "
            f"cpu {total.cpu_m}/{cap.cpu_m}m, memory {total.memory >> 20}/{cap.memory >> 20}Mi, "
            f"pods {total.pods}/{cap.pods}"
        )
    return "\n".join(lines)


def _is_daemon(pod: Pod) -> bool:
    return pod.owner.startswith("DaemonSet ")
