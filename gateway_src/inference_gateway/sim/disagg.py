"""Disaggregated prefill and decode on the simulator's clock, as the emulator plays them.

A P/D policy answers a request with a `Split` (its decode pod and its prefill pod, both
from the director's decision). The request then runs as the emulated NixlConnector pods
run it (`emulator/kvtransfer.py`, `emulator/disagg.py`), with their rules and their
numbers, the wire left out:

* **prefill leg** on the prefill pod: the prompt with one output token (`max_tokens 1`);
  when it finishes, the pod keeps the prompt's blocks (a reference on its pool, as
  vLLM's delayed free and `Disaggregation.keep` do);
* **transfer**: the decode pod reads them `transfer_seconds(blocks, kv_bytes_per_token,
  link_gbytes_per_s(...))` later on the virtual clock; the prefill pod lets them go and
  the decode pod pins them in its own pool (`Disaggregation.pull`); where they do not fit,
  it prefills the prompt itself (vLLM's "recompute" load-failure policy);
* **decode leg** on the decode pod: the whole request, whose prompt the engine's prefix
  match now finds computed but for its last partial block, so it decodes at once; the
  pinned blocks are let go when it finishes (the emulator's `unpin`).

Each simulated pod is its own node (a pod of the scenario is a whole TP group), so the
link is the slower of the two instances' networks. Every prompt block gets a hash here
(shared blocks keep the workload's ids, the rest unique to the request), as vLLM hashes
every full block; an aggregated request needs none for its private blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inference_gateway.emulator.engine import Engine, EngineRequest
from inference_gateway.emulator.kvtransfer import link_gbytes_per_s, transfer_seconds
from inference_gateway.emulator.profiles import BLOCK_SIZE
from inference_gateway.sim.pods import SimPod
from inference_gateway.sim.workload import SimRequest, shared_blocks

__all__ = ["PrefillLeg", "Split", "Transfers", "pd_claim", "prompt_blocks"]

PRIVATE_BLOCK_BASE = 1 << 60  # a request's own block hashes (workload ids stay below)
REQUEST_BLOCK_BITS = 17  # room for 2^17 blocks (two million tokens) per request
# issue 25's claim for a split fleet against the same GPUs aggregated
PD_TPOT_P99_AT_MOST = 0.5
PD_TTFT_P99_AT_MOST = 1.2
#: tokens/s this close count as equal throughput when both serve every request
PD_THROUGHPUT_EQUAL = 0.005


@dataclass(frozen=True, slots=True)
class Split:
    """A P/D policy's answer: decode on `decode`, prefill first on `prefill`."""

    decode: SimPod
    prefill: SimPod


@dataclass(slots=True, eq=False)
class PrefillLeg:
    """One request's P/D state, from its prefill leg until its KV reaches the decode pod
    (the prefill leg's engine tag)."""

    request: SimRequest
    split: Split
    hashes: tuple[int, ...]
    sent: float
    kept_by: Engine | None = None  # the prefill engine holding the blocks (a pod lost since: gone)


def prompt_blocks(request: SimRequest) -> tuple[int, ...]:
    """A hash for every full block of the prompt: its shareable blocks', then its own."""
    shared = shared_blocks(request)
    full = request.prompt_tokens // BLOCK_SIZE
    if len(shared) >= full:
        return tuple(shared[:full])
    base = PRIVATE_BLOCK_BASE + (request.request_id << REQUEST_BLOCK_BITS)
    return tuple(shared) + tuple(range(base + len(shared), base + full))


class Transfers:
    """The fleet's P/D legs: `start` a prefill leg, `prefilled` when it ends (keeps the
    blocks and schedules the read), `arrived` when the read completes (the decode leg),
    `finished` when a request ends (lets pinned blocks go)."""

    def __init__(self, schedule: Callable[[float, PrefillLeg], None]) -> None:
        self.schedule = schedule  # the driver's event queue: the read completes then
        # request → the decode engine holding its read blocks (a lost pod's: let go with it)
        self.pinned: dict[int, tuple[Engine, tuple[int, ...]]] = {}
        self.legs = 0
        self.fallbacks = 0  # reads that did not fit: prefilled on the decode pod

    def start(self, request: SimRequest, split: Split, now: float) -> EngineRequest:
        """The prefill leg, for the driver to submit to `split.prefill`."""
        self.legs += 1
        leg = PrefillLeg(request, split, prompt_blocks(request), now)
        return EngineRequest(
            request.request_id, request.prompt_tokens, 1, leg.hashes, request.adapter, tag=leg
        )

    def prefilled(self, leg: PrefillLeg, now: float) -> None:
        """The prefill leg ended: keep its blocks, read them after the transfer time."""
        prefill, decode = leg.split.prefill, leg.split.decode
        if prefill.engine.pool.try_acquire(leg.hashes, 0):
            leg.kept_by = prefill.engine
        else:
            leg.hashes = ()  # nothing kept: nothing to read
        link = link_gbytes_per_s(prefill.profile.instance, None, decode.profile.instance, None)
        seconds = transfer_seconds(len(leg.hashes), decode.profile.model.kv_bytes_per_token, link)
        self.schedule(now + seconds, leg)

    def arrived(self, leg: PrefillLeg) -> tuple[EngineRequest, SimPod]:
        """The read completed: the decode leg and its pod, for the driver to submit."""
        request, decode = leg.request, leg.split.decode
        hashes = leg.hashes
        if self.let_go(leg):
            if decode.engine.pool.try_acquire(hashes, 0):
                self.pinned[request.request_id] = (decode.engine, hashes)
            else:
                self.fallbacks += 1
        else:  # nothing kept, or the prefill pod was lost with them: the read fails
            self.fallbacks += 1
        engine_request = EngineRequest(
            request.request_id,
            request.prompt_tokens,
            request.output_tokens,
            hashes or prompt_blocks(request),
            request.adapter,
            tag=(request, decode),
        )
        return engine_request, decode

    def let_go(self, leg: PrefillLeg) -> bool:
        """The prefill pod lets the leg's kept blocks go (read, or never to be: its decode
        pod was lost); False when it holds none (nothing kept, or the pod was lost)."""
        kept, leg.kept_by = leg.kept_by, None
        if kept is None or kept is not leg.split.prefill.engine:
            return False
        kept.pool.release(leg.hashes, 0)
        return True

    def finished(self, request_id: int) -> None:
        pinned = self.pinned.pop(request_id, None)
        if pinned is not None:
            engine, hashes = pinned
            engine.pool.release(hashes, 0)

    def report(self) -> dict[str, Any]:
        return {"prefill_legs": self.legs, "kv_read_fallbacks": self.fallbacks}


def pd_claim(aggregated: dict[str, Any], split: dict[str, Any]) -> dict[str, Any]:
    """Issue 25's must-hold on one scenario's two reports (`gateway`, `gateway-pd`): the
    split's P99 TPOT at most half the aggregated one's, its P99 TTFT at most 1.2x, its
    output throughput equal or better, and no more requests refused; the ratios and a
    verdict. Equal throughput: every request the aggregated fleet completed completed
    too, and tokens/s within `PD_THROUGHPUT_EQUAL` (when both serve all the offered
    load, tokens/s differs only by when the last answer ends)."""
    tpot = split["tpot_p99_s"] / aggregated["tpot_p99_s"]
    ttft = split["ttft_p99_s"] / aggregated["ttft_p99_s"]
    throughput = split["output_tokens_per_s"] / aggregated["output_tokens_per_s"]
    return {
        "tpot_p99_ratio": round(tpot, 4),
        "ttft_p99_ratio": round(ttft, 4),
        "output_tokens_per_s_ratio": round(throughput, 4),
        "pass": tpot <= PD_TPOT_P99_AT_MOST
        and ttft <= PD_TTFT_P99_AT_MOST
        and split["completed"] >= aggregated["completed"]
        and throughput >= 1.0 - PD_THROUGHPUT_EQUAL
        and split["rejected"] <= aggregated["rejected"],
    }
