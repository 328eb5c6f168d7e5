"""How loaded the demo's fleet is: its capacity for the trace's own requests.

A P99 ratio means little without the load behind it, so the demo says what fraction of
the fleet's capacity its trace asks for, and what share of an A10G's capacity a router
that ignores the pods' differences hands each A10G. Capacity is the simulator's
closed-loop probe (`sim.capacity.closed_loop`, the same engine model the emulated pods
run): one pod of each profile kept as full as its KV cache allows with the trace's
requests (their prompt and answer lengths, the shared system prompts as shared prefix
blocks), its completion rate in steady state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inference_gateway.demo.trace import TraceItem
from inference_gateway.emulator.profiles import pod_profile
from inference_gateway.emulator.tokens import BLOCK_BYTES, count_tokens, render_chat
from inference_gateway.sim.capacity import PROBE_REQUESTS, closed_loop
from inference_gateway.sim.workload import BLOCK_TOKENS, SimRequest

__all__ = ["Load", "fleet_load"]


@dataclass(frozen=True, slots=True)
class Load:
    per_pod_rps: dict[str, float]  # GPU → one pod's capacity for these requests
    fleet_rps: float
    mean_rps: float  # what the trace asks for, on average
    peak_rps: float  # in its bursts

    def even_share(self, gpu: str, pods: int) -> float:
        """A pod of `gpu`'s load in a burst when every pod gets 1/`pods` of the requests
        (round robin), as a fraction of its capacity."""
        return self.peak_rps / pods / self.per_pod_rps[gpu]


def _requests(trace: Sequence[TraceItem]) -> list[SimRequest]:
    """The trace's requests in the simulator's terms; a system prompt is a shared prefix
    of its whole blocks (the emulator's rule: 16 tokens of 4 bytes)."""
    groups: dict[str, int] = {}
    out = []
    for item in trace:
        request = SimRequest(0.0, count_tokens(render_chat(item.messages)), item.max_tokens)
        if item.messages[0]["role"] == "system":
            system = render_chat(item.messages[:1])[: -len("<|assistant|>\n")]
            request.prefix_group = groups.setdefault(system, len(groups))
            request.prefix_tokens = len(system.encode()) // BLOCK_BYTES * BLOCK_TOKENS
        out.append(request)
    return out


def fleet_load(
    trace: Sequence[TraceItem], fleet: Mapping[str, Any], mean_rps: float, peak_rps: float
) -> Load:
    """The fleet spec's capacity for `trace`'s requests, beside the trace's rates."""
    requests = _requests(trace)
    probe = [requests[i % len(requests)] for i in range(PROBE_REQUESTS)]
    mean_tokens = sum(r.prompt_tokens + r.output_tokens for r in probe) / len(probe)
    per_pod: dict[str, float] = {}
    fleet_rps = 0.0
    for group in fleet["pods"]:
        profile = pod_profile(group["gpu"], group["model"])
        if profile.gpu.name not in per_pod:
            fits = int(0.9 * profile.kv_capacity_tokens / mean_tokens)
            concurrency = max(1, min(profile.max_num_seqs, fits))
            per_pod[profile.gpu.name] = closed_loop(profile, probe, concurrency).requests_per_s
        fleet_rps += per_pod[profile.gpu.name] * group["replicas"]
    return Load(per_pod, fleet_rps, mean_rps, peak_rps)
