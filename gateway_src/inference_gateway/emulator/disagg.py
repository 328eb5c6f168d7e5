"""One emulated pod's side of disaggregated serving (the protocol: `kvtransfer.py`).

It keeps a prefill leg's prompt blocks after the request finishes (a reference on the
pod's block pool, so the blocks count as used, as vLLM's delayed free does), answers
the decode pod's read of them, and, on a decode pod, reads a prompt's blocks from the
prefill pod and places them in its own pool before the request is admitted, so the
engine's prefix match finds all but the last token computed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable, Sequence
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from inference_gateway.emulator.kvtransfer import (
    READ_PATH,
    KVTransferConfig,
    PendingSends,
    RemotePrefill,
    link_gbytes_per_s,
    transfer_seconds,
)
from inference_gateway.emulator.profiles import PodProfile, instance_profiles
from inference_gateway.emulator.realtime import RealtimeDriver

__all__ = ["Disaggregation"]

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 10.0


class Disaggregation:
    """A NixlConnector pod: `keep` a finished prefill leg, `read` (the handler the decode
    pod calls), `pull` a decode leg's blocks, `unpin` them once the request is done."""

    def __init__(self, config: KVTransferConfig, profile: PodProfile, driver: RealtimeDriver):
        self.config = config
        self.profile = profile
        self.driver = driver
        self.sends = PendingSends(timeout_s=config.abort_timeout_s)
        self.address: tuple[str, int] | None = None  # set once the pod listens
        self.reads_served = 0
        self.pulls = 0
        self.pull_failures = 0

    # ------------------------------------------------------------------ prefill side

    def keep(self, request_id: str, hashes: Sequence[Hashable]) -> dict[str, Any]:
        """Pin a length-capped prefill leg's prompt blocks; its `kv_transfer_params`."""
        self._free_expired()
        assert self.address is not None, "the pod is not listening"
        pool = self.driver.engine.pool
        kept: Sequence[Hashable] = hashes if pool.try_acquire(hashes, 0) else ()
        block_ids = self.sends.pin(request_id, kept) if kept else ()
        host, port = self.address
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": list(block_ids),
            "remote_engine_id": self.config.engine_id,
            "remote_request_id": request_id,
            "remote_host": host,
            "remote_port": port,
            "tp_size": self.profile.tp,
        }

    async def read(self, request: web.Request) -> web.Response:
        """The decode pod's read: release the pinned blocks, say what moved."""
        try:
            body = orjson.loads(await request.read())
            engine, request_id = body["engine_id"], body["request_id"]
            block_ids = body["block_ids"]
            valid = (
                isinstance(engine, str)
                and isinstance(request_id, str)
                and isinstance(block_ids, list)
                and all(isinstance(b, int) for b in block_ids)
            )
        except (orjson.JSONDecodeError, KeyError, TypeError):
            valid = False
        if not valid:
            return web.json_response({"error": "malformed read"}, status=400)
        self._free_expired()
        hashes = self.sends.take(request_id, block_ids) if engine == self.config.engine_id else None
        if hashes is None:
            return web.json_response({"error": "no such blocks (freed or never kept)"}, status=404)
        self.driver.sync()
        self.driver.engine.pool.release(hashes, 0)
        self.reads_served += 1
        return web.json_response(
            {
                "blocks": len(hashes),
                "instance": self.profile.instance.name,
                "node": self.config.node,
            }
        )

    def _free_expired(self) -> None:
        pool = self.driver.engine.pool
        for hashes in self.sends.expired(time.monotonic()):
            pool.release(hashes, 0)

    # ------------------------------------------------------------------ decode side

    async def pull(
        self, remote: RemotePrefill, hashes: Sequence[Hashable], session: aiohttp.ClientSession
    ) -> Sequence[Hashable]:
        """Read the prompt's blocks from the prefill pod and pin them here (the returned
        hashes, to `unpin` when the request is done); () when there is nothing to read or
        the read failed, and the pod then prefills the prompt itself."""
        if not remote.block_ids:
            return ()
        self.pulls += 1
        url = f"http://{remote.host}:{remote.port}{READ_PATH}"
        body = {
            "engine_id": remote.engine_id,
            "request_id": remote.request_id,
            "block_ids": list(remote.block_ids),
        }
        try:
            async with session.post(url, json=body) as response:
                if response.status != 200:
                    raise aiohttp.ClientResponseError(
                        response.request_info, (), status=response.status
                    )
                facts = await response.json()
            blocks = int(facts["blocks"])
            other = instance_profiles().get(str(facts["instance"]), self.profile.instance)
            node = facts.get("node")
        except (aiohttp.ClientError, TimeoutError, KeyError, TypeError, ValueError) as error:
            self.pull_failures += 1
            log.info("KV read from %s failed (%s); prefilling here", url, type(error).__name__)
            return ()
        link = link_gbytes_per_s(
            self.profile.instance,
            self.config.node,
            other,
            node if isinstance(node, str) else None,
        )
        await asyncio.sleep(transfer_seconds(blocks, self.profile.model.kv_bytes_per_token, link))
        pulled = hashes[: min(blocks, len(hashes))]
        self.driver.sync()
        if not self.driver.engine.pool.try_acquire(pulled, 0):
            self.pull_failures += 1
            log.info("no room for %d read KV blocks; prefilling here", len(pulled))
            return ()
        return pulled

    def unpin(self, hashes: Sequence[Hashable]) -> None:
        if hashes:
            self.driver.sync()
            self.driver.engine.pool.release(hashes, 0)

    @staticmethod
    def session() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=READ_TIMEOUT_S))
