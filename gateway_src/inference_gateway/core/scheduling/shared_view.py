"""One dispatch view for N gateway replicas: what each publishes, and how the others'
counts enter its picking.

A replica knows exactly what it sent itself (`Endpoint.sent_requests`: dispatched since
the last scrape, no first token yet; `Endpoint.prefill_tokens`: uncached prompt tokens
with no first token yet), but not what the other replicas sent since the last scrape,
so in a burst they all pick the pod that looked best at that scrape (herding). Each
replica therefore publishes its own two counts per pod every few milliseconds and sums
the others' into `Endpoint.peer_requests` / `Endpoint.peer_prefill_tokens`, which the
scorers and the saturation detector add to their own counts.

Only absolute counts travel, never increments: a lost or repeated publish changes
nothing, and a replica that stops publishing simply drops out when its entry expires.
Pods are keyed by `ip:port`, the identity every replica discovers the same way.

The transport lives elsewhere: `shared_store.dispatch` (a Redis-protocol store, in a
background loop) and `sim.replicas` (the same exchange on the simulator's clock, with
the same interval and a store round trip). Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from inference_gateway.core.scheduling.types import Endpoint

__all__ = [
    "PUBLISH_INTERVAL_S",
    "STORE_RTT_S",
    "DispatchCounts",
    "apply_peer_dispatch",
    "own_dispatch",
]

# How often a replica publishes its counts and reads the others' (one store round trip
# per tick). 5 ms is a tenth of the default 50 ms scrape interval: the others' bursts are
# seen well inside one scrape interval, for ~200 small commands a second per replica.
PUBLISH_INTERVAL_S = 0.005
# A store round trip inside one VPC / availability zone (ElastiCache documents
# sub-millisecond latency; 1 ms leaves room for a loaded client). The simulator charges
# it on every exchange.
STORE_RTT_S = 0.001

DispatchCounts = dict[str, tuple[int, int]]  # pod ip:port → (requests, prefill tokens)


def own_dispatch(endpoints: Iterable[Endpoint]) -> DispatchCounts:
    """What this replica publishes: its own pending requests and prefill tokens per pod
    (pods with neither are left out, so an idle replica publishes `{}`)."""
    return {
        e.hostport: (e.sent_requests, e.prefill_tokens)
        for e in endpoints
        if e.sent_requests or e.prefill_tokens
    }


def apply_peer_dispatch(
    endpoints: Iterable[Endpoint], peers: Iterable[Mapping[str, tuple[int, int]]]
) -> None:
    """Set each endpoint's peer counts to the sum over the other replicas' published
    counts (no peers: 0, the local view). Pods a peer names that this replica does not
    know are ignored."""
    requests: dict[str, int] = {}
    prefill: dict[str, int] = {}
    for counts in peers:
        for hostport, (n, tokens) in counts.items():
            requests[hostport] = requests.get(hostport, 0) + n
            prefill[hostport] = prefill.get(hostport, 0) + tokens
    for e in endpoints:
        e.peer_requests = requests.get(e.hostport, 0)
        e.peer_prefill_tokens = prefill.get(e.hostport, 0)
