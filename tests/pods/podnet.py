"""A pod network made of Linux network namespaces, as a CNI plugin gives each pod one.

One namespace holds a bridge (the node's pod network); every pod gets a namespace of its
own with `lo` and an `eth0` on that bridge, and this process's namespace joins it through
one veth with the first address of the subnet (the node, from which the kubelet probes).
Nothing is routed off the subnet and no address outside it is reachable, so a container
that tries to reach the internet fails at once (there is no default route), as a pod would
behind a deny-all egress policy. Everything is made with `ip` (iproute2) and removed by
`close()`: deleting the namespaces deletes their veths, the node's end included.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import subprocess
from dataclasses import dataclass, field

_NETWORKS = itertools.count()


def ip(*argv: str, netns: str | None = None) -> None:
    """Run one `ip` command (in NETNS when given); its error text in the exception."""
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    done = subprocess.run([*prefix, *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(argv)}: {done.stderr.strip()}")


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.213.0.0/16 that no route of this host covers already."""
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    taken = []
    for line in routes.splitlines():
        first = line.split()[0]
        if first != "default":
            taken.append(ipaddress.ip_network(first, strict=False))
    for third in range(os.getpid() % 200, os.getpid() % 200 + 250):
        candidate = ipaddress.ip_network(f"10.213.{third % 250}.0/24")
        if not any(candidate.overlaps(net) for net in taken):
            return candidate
    raise RuntimeError("no free /24 in 10.213.0.0/16 for the pod network")


@dataclass
class PodNetwork:
    """The bridge namespace, the node's address, and the pods' namespaces."""

    tag: str = field(default_factory=lambda: f"igw{os.getpid() % 10000}x{next(_NETWORKS)}")
    subnet: ipaddress.IPv4Network = field(default_factory=free_subnet)
    pods: dict[str, str] = field(default_factory=dict)  # pod name -> namespace

    @property
    def bridge_ns(self) -> str:
        return f"{self.tag}-br"

    @property
    def node_ip(self) -> str:
        return str(self.subnet.network_address + 1)

    def open(self) -> PodNetwork:
        ip("netns", "add", self.bridge_ns)
        ip("link", "set", "lo", "up", netns=self.bridge_ns)
        ip("link", "add", "br0", "type", "bridge", netns=self.bridge_ns)
        ip("link", "set", "br0", "up", netns=self.bridge_ns)
        node_if = f"{self.tag}n"[:15]
        ip("link", "add", node_if, "type", "veth", "peer", "name", "node", "netns", self.bridge_ns)
        ip("link", "set", "node", "master", "br0", "up", netns=self.bridge_ns)
        ip("addr", "add", f"{self.node_ip}/{self.subnet.prefixlen}", "dev", node_if)
        ip("link", "set", node_if, "up")
        return self

    def add_pod(self, name: str) -> tuple[str, str]:
        """A namespace for pod NAME on the bridge: (namespace name, pod IP)."""
        index = len(self.pods) + 1
        netns = f"{self.tag}-p{index}"
        pod_ip = str(self.subnet.network_address + 10 + index)
        ip("netns", "add", netns)
        ip("link", "set", "lo", "up", netns=netns)
        port = f"p{index}"
        ip(
            "link",
            "add",
            port,
            "netns",
            self.bridge_ns,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            netns,
        )
        ip("link", "set", port, "master", "br0", "up", netns=self.bridge_ns)
        ip("addr", "add", f"{pod_ip}/{self.subnet.prefixlen}", "dev", "eth0", netns=netns)
        ip("link", "set", "eth0", "up", netns=netns)
        self.pods[name] = netns
        return netns, pod_ip

    def close(self) -> None:
        for netns in [*self.pods.values(), self.bridge_ns]:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
        self.pods.clear()
