"""Disaggregated prefill and decode, as vLLM's NixlConnector plays it, for emulated pods.

A pod started with vLLM's own flag `--kv-transfer-config '{"kv_connector":
"NixlConnector", "kv_role": "kv_both"}'` honours a request's `kv_transfer_params` the way
vLLM does (`vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`, and the
client side in `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`):

* **Prefill leg** (`{"do_remote_decode": true}`, sent with `max_tokens: 1`, not
  streamed): the pod prefills, and when the request finishes length-capped it keeps the
  prompt's KV blocks (vLLM's `delay_free_blocks`) and answers with `kv_transfer_params`
  `{do_remote_prefill: true, do_remote_decode: false, remote_block_ids,
  remote_engine_id, remote_request_id, remote_host, remote_port, tp_size}`. Blocks no
  decode pod reads within `abort_timeout_s` are freed (vLLM's
  `VLLM_NIXL_ABORT_REQUEST_TIMEOUT`, 480 s by default).
* **Decode leg** (those params back): the pod reads the blocks from the prefill pod,
  taking the time the bytes need on the link between the two pods, then admits the
  request with the prompt's KV in place, so it computes only the last token (vLLM leaves
  it to the consumer: `get_num_new_matched_tokens` matches `len(prompt) - 1`) and
  decodes. A read that fails (blocks freed, pod gone) falls back to a local prefill, as
  vLLM's default `kv_load_failure_policy` ("recompute") does.

The read itself is the one thing vLLM does over NIXL (RDMA): here it is a POST to the
prefill pod's own HTTP port (`remote_port`), `/_emulator/nixl/read`, which releases the
pinned blocks and returns what the transfer time needs (the block count and the prefill
pod's instance and node). The link (`link_gbytes_per_s`): NVLink or PCIe inside one node
(the instance's GPU interconnect), else the slower of the two instances' networks (EFA on
the instances that have it, ENA otherwise; `profiles/instances.yaml`, `network_gbps`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inference_gateway.emulator.profiles import BLOCK_SIZE, InstanceProfile
from inference_gateway.errors import ConfigError

__all__ = [
    "READ_PATH",
    "KVTransferConfig",
    "PendingSends",
    "RemotePrefill",
    "link_gbytes_per_s",
    "parse_kv_transfer_config",
    "remote_prefill_of",
    "transfer_seconds",
    "wants_remote_decode",
]

READ_PATH = "/_emulator/nixl/read"
#: vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT default: unread blocks are freed after it.
ABORT_TIMEOUT_S = 480.0
#: Fixed cost of one transfer (handshake, descriptor exchange); unverified.
TRANSFER_LATENCY_S = 0.0005
MAX_BLOCK_IDS = 1 << 16  # a prompt of a million tokens; more is hostile


class KVTransferConfig(BaseModel):
    """vLLM's `--kv-transfer-config` (`vllm/config/kv_transfer.py`, `KVTransferConfig`),
    the fields a NixlConnector pod uses; `kv_connector_extra_config.node` (emulator
    only) names the node a pod runs on, for the link between two pods."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_connector: Literal["NixlConnector"]
    kv_role: Literal["kv_both", "kv_producer", "kv_consumer"]
    engine_id: str = Field(default_factory=lambda: str(uuid.uuid4()), min_length=1)
    kv_connector_extra_config: dict[str, Any] = Field(default_factory=dict)
    kv_buffer_device: str | None = None
    kv_ip: str | None = None
    kv_port: int | None = None

    @property
    def node(self) -> str | None:
        node = self.kv_connector_extra_config.get("node")
        return node if isinstance(node, str) and node else None

    @property
    def abort_timeout_s(self) -> float:
        value = self.kv_connector_extra_config.get("abort_timeout_s", ABORT_TIMEOUT_S)
        return float(value) if isinstance(value, int | float) and value > 0 else ABORT_TIMEOUT_S

    @property
    def produces(self) -> bool:
        return self.kv_role in ("kv_both", "kv_producer")

    @property
    def consumes(self) -> bool:
        return self.kv_role in ("kv_both", "kv_consumer")


def parse_kv_transfer_config(value: str | Mapping[str, Any], source: str) -> KVTransferConfig:
    """The flag's JSON (or a fleet file's mapping); ConfigError names the bad field."""
    try:
        data = orjson.loads(value) if isinstance(value, str) else dict(value)
        return KVTransferConfig.model_validate(data)
    except orjson.JSONDecodeError as error:
        raise ConfigError(source, [f"kv_transfer_config: invalid JSON ({error})"]) from None
    except ValidationError as error:
        problems = [
            f"kv_transfer_config.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()
        ]
        raise ConfigError(source, problems) from None


def wants_remote_decode(params: Any) -> bool:
    """A prefill leg: `do_remote_decode` true (and no remote prefill to pull)."""
    return (
        isinstance(params, dict)
        and params.get("do_remote_decode") is True
        and params.get("do_remote_prefill") is not True
    )


@dataclass(frozen=True, slots=True)
class RemotePrefill:
    """A decode leg's checked params: where the prompt's blocks wait."""

    engine_id: str
    request_id: str
    block_ids: tuple[int, ...]
    host: str
    port: int


def remote_prefill_of(params: Any) -> RemotePrefill | None:
    """The decode leg's params, or None when the request is not one; ValueError when it
    claims to be one with fields that do not hold (a client's values are hostile)."""
    if not isinstance(params, dict) or params.get("do_remote_prefill") is not True:
        return None
    engine, request = params.get("remote_engine_id"), params.get("remote_request_id")
    host, port = params.get("remote_host"), params.get("remote_port")
    blocks = params.get("remote_block_ids")
    if not isinstance(engine, str) or not engine or len(engine) > 256:
        raise ValueError("kv_transfer_params.remote_engine_id must be a string")
    if not isinstance(request, str) or not request or len(request) > 256:
        raise ValueError("kv_transfer_params.remote_request_id must be a string")
    if not isinstance(host, str) or not host or len(host) > 253:
        raise ValueError("kv_transfer_params.remote_host must be a host name or address")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ValueError("kv_transfer_params.remote_port must be a port number")
    if (
        not isinstance(blocks, list)
        or len(blocks) > MAX_BLOCK_IDS
        or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in blocks)
    ):
        raise ValueError("kv_transfer_params.remote_block_ids must be a list of block ids")
    return RemotePrefill(engine, request, tuple(blocks), host, port)


@dataclass(slots=True)
class _Pinned:
    hashes: Sequence[Hashable]
    block_ids: tuple[int, ...]
    deadline: float


@dataclass
class PendingSends:
    """The prefill pod's pinned prompts, by request id, until read or timed out."""

    timeout_s: float
    pinned: dict[str, _Pinned] = field(default_factory=dict)
    _next_block: int = 0

    def pin(self, request_id: str, hashes: Sequence[Hashable]) -> tuple[int, ...]:
        """Record a kept prompt and name its blocks (ids unique on this pod)."""
        ids = tuple(range(self._next_block, self._next_block + len(hashes)))
        self._next_block += len(hashes)
        self.pinned[request_id] = _Pinned(hashes, ids, time.monotonic() + self.timeout_s)
        return ids

    def take(self, request_id: str, block_ids: Sequence[int]) -> Sequence[Hashable] | None:
        """The hashes of a read prompt (unpinned now), or None: unknown, freed, or the
        ids do not match what was pinned."""
        pinned = self.pinned.get(request_id)
        if pinned is None or tuple(block_ids) != pinned.block_ids:
            return None
        del self.pinned[request_id]
        return pinned.hashes

    def expired(self, now: float) -> list[Sequence[Hashable]]:
        """Drop and return the prompts nobody read in time."""
        gone = [rid for rid, p in self.pinned.items() if p.deadline <= now]
        return [self.pinned.pop(rid).hashes for rid in gone]


def link_gbytes_per_s(
    local: InstanceProfile,
    local_node: str | None,
    remote: InstanceProfile,
    remote_node: str | None,
) -> float:
    """GB/s between two pods: the node's GPU interconnect when both name the same node
    (and so one instance shape), else the slower of the two instances' networks."""
    if local_node is not None and local_node == remote_node and local.name == remote.name:
        return local.allreduce_busbw_gbs
    gbits = min(local.network_gbps, remote.network_gbps)
    return gbits / 8.0


def transfer_seconds(blocks: int, kv_bytes_per_token: int, gbytes_per_s: float) -> float:
    """Time to move `blocks` KV blocks of a model over a link of `gbytes_per_s`."""
    return TRANSFER_LATENCY_S + blocks * BLOCK_SIZE * kv_bytes_per_token / (gbytes_per_s * 1e9)
