"""`igw picker`'s Kubernetes mode: pods, config, leadership and status from the API.

Without `--endpoints` the picker's pods come from the pools of its config (label
selector and target port) and from the InferencePools named by `--pool`; its config
from the InferenceGatewayConfig, InferenceObjective and InferenceModelRewrite resources
of its namespace (or from files, with `watch_api` off); with leader election, a Lease
decides which replica serves; and the config's status is written back.

`KubernetesMode.connect` builds all of it around one core (`assembly.core.build_core`),
each part constructed with its collaborators, and `server()` wraps them in a
`PickerServer`, unstarted. A config that changes the pools re-targets discovery (`apply`
is the config sources' one callback). `close()` ends what the mode itself started: pool
re-targeting still under way and the API client.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inference_gateway.assembly.config_watch import FileConfigSource, KubernetesConfigSource
from inference_gateway.assembly.core import Core, build_core
from inference_gateway.assembly.picker import Lifecycle, PickerServer
from inference_gateway.background import cancel_and_wait
from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling.config_checks import load_config
from inference_gateway.core.traffic.rewrites import RewriteSet
from inference_gateway.errors import ConfigError
from inference_gateway.kubernetes.config_status import ConfigStatusWriter
from inference_gateway.kubernetes.discovery import (
    LeaderElector,
    PodDiscovery,
    PodSource,
    PoolTarget,
    api_client,
    read_inference_pool,
)

__all__ = ["KubernetesMode", "KubernetesOptions"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KubernetesOptions:
    """What the command line says about the cluster (see `igw picker --help`)."""

    namespace: str = "default"
    pools: Sequence[str] = ()  # InferencePools to serve beside the config's pools
    kubeconfig: str | None = None
    api_server: str | None = None  # a URL without credentials (dev, tests)
    config: str | None = None  # the base config file
    rewrites: str | None = None  # files, when the API is not watched
    config_name: str = "igw"
    watch_api: bool = True
    leader_elect: bool = False
    # with leader election: only the holder is ready (active-passive), or, False, every
    # replica stays ready and routes and the holder alone writes the status
    leader_gates_readiness: bool = True
    lease_name: str = "igw-picker"
    identity: str = ""  # this replica in the Lease (default: $POD_NAME, else the host name)
    status_interval_s: float = 5.0


class KubernetesMode:
    """The picker's Kubernetes parts around one core; `server()` runs them."""

    def __init__(
        self,
        client: Any,
        options: KubernetesOptions,
        named: list[PoolTarget],
        base: GatewayConfigSpec | None,
    ) -> None:
        self.client = client
        self.options = options
        self.named = named
        spec = base or GatewayConfigSpec()
        self.core: Core = build_core([], base)
        self.discovery = PodDiscovery(
            self.core.store,
            self.targets(spec),
            lambda p: PodSource(client, p.namespace, p.selector),
        )
        self.declared = self._declared(spec)
        self._retargeting: set[asyncio.Task[None]] = set()
        metrics = self.core.metrics
        self.config_source: FileConfigSource | KubernetesConfigSource = (
            KubernetesConfigSource(
                self.apply,
                client,
                options.namespace,
                config_name=options.config_name,
                base=base,
                metrics=metrics,
            )
            if options.watch_api
            else FileConfigSource(self.apply, options.config, options.rewrites, metrics=metrics)
        )
        self.elector = (
            LeaderElector(
                client,
                options.namespace,
                options.lease_name,
                options.identity or os.environ.get("POD_NAME") or socket.gethostname(),
            )
            if options.leader_elect
            else None
        )
        self.parts: list[Lifecycle] = [self.config_source, self.discovery]
        if self.elector is not None:
            self.parts.append(self.elector)
        source = self.config_source
        if isinstance(source, KubernetesConfigSource):
            self.parts.append(
                ConfigStatusWriter(
                    client,
                    options.namespace,
                    resource=source.served_resource,
                    config_error=lambda: source.last_error,
                    pools=self.core.store.pools,
                    declared=lambda: list(self.declared),
                    is_leader=self.is_leader,
                    interval_s=options.status_interval_s,
                )
            )

    @classmethod
    async def connect(cls, options: KubernetesOptions) -> KubernetesMode:
        """Reach the API server and read the named InferencePools (`ConfigError` when
        there are no usable credentials)."""
        try:
            client = await api_client(host=options.api_server, kubeconfig=options.kubeconfig)
        except ModuleNotFoundError:  # not bad input: the CLI says what to install
            raise
        except Exception as error:  # the client's config errors, translated at the boundary
            raise ConfigError(
                "Kubernetes discovery",
                [
                    f"<credentials>: no in-cluster service account or usable kubeconfig "
                    f"({error}); pass --endpoints FILE to run without Kubernetes"
                ],
            ) from None
        try:
            base = load_config(options.config) if options.config else None
            named = [
                await read_inference_pool(client, options.namespace, name) for name in options.pools
            ]
        except BaseException:
            await client.close()
            raise
        return cls(client, options, named, base)

    def server(self, extra: Sequence[Lifecycle] = (), **server_kwargs: Any) -> PickerServer:
        """The picker over this mode's core: its parts start first (config, discovery,
        lease, status), then `extra` (EMF records, the shared dispatch view)."""
        gated = self.options.leader_gates_readiness
        return PickerServer(
            self.core,
            collaborators=[*self.parts, *extra],
            is_leader=self.is_leader if gated else lambda: True,
            synced=self.synced,
            **server_kwargs,
        )

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def synced(self) -> bool:
        """Ready once the config and every pool's pods are listed (zero pods included)."""
        config_synced = getattr(self.config_source, "is_synced", lambda: True)
        return bool(config_synced()) and self.discovery.is_synced()

    def targets(self, spec: GatewayConfigSpec) -> list[PoolTarget]:
        """The named InferencePools, then the config's pools not named so."""
        named = {n.name for n in self.named}
        from_config = [
            PoolTarget(p.name, p.selector, (p.target_port,), self.options.namespace)
            for p in spec.pools
            if p.name not in named
        ]
        return [*self.named, *from_config]

    def _declared(self, spec: GatewayConfigSpec) -> list[str]:
        return [p.name for p in spec.pools] + [n.name for n in self.named]

    def apply(self, config: GatewayConfigSpec | None, rewrites: RewriteSet) -> None:
        """The config sources' callback: the core takes the config, discovery its pools."""
        self.core.apply_config(config, rewrites)
        spec = config or GatewayConfigSpec()
        self.declared = self._declared(spec)
        task = asyncio.get_running_loop().create_task(self.discovery.set_pools(self.targets(spec)))
        self._retargeting.add(task)
        task.add_done_callback(self._retargeting.discard)

    async def close(self) -> None:
        for task in list(self._retargeting):
            await cancel_and_wait(task)
        await self.client.close()
