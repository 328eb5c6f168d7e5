"""Live config for the picker: from mounted files or from the Kubernetes API.

Both sources end in the same call, `apply(config, rewrites)`, with a complete, validated
state: an InferenceGatewayConfig spec (plus the InferenceObjectives) and the set of
InferenceModelRewrites. Nothing half-valid is ever applied. An invalid update is
rejected with a log line that names the field paths — and, from the API, a Warning
Event on the offending resource so `kubectl describe` shows it — and the last good
state keeps serving.

    FileConfigSource        a config file and a rewrites file or folder (ConfigMap
                            mounts), polled every second by `config.reloader`, read
                            and validated off the event loop
    KubernetesConfigSource  reflectors on InferenceGatewayConfig, InferenceObjective and
                            InferenceModelRewrite of one namespace

Every reload attempt is counted, applied or rejected, in `igw_config_reloads_total`
(`telemetry.GatewayMetrics.config_reloads`) when a metrics object is given. A file
reload goes through `guard_reload`, so that no failure, however unexpected (bytes that
are not UTF-8 in a rewrites file, a bug in a builder), can end the watcher: it is
turned into a `ConfigError` the watcher logs, and the next edit is read as usual.
An empty or comment-only config file is rejected (`config_checks.load_config`); `{}` asks for
the defaults on purpose.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inference_gateway.background import cancel_and_wait
from inference_gateway.config.spec import API_GROUP, API_VERSION, GatewayConfigSpec
from inference_gateway.core.scheduling.config_checks import load_config, parse_config
from inference_gateway.core.traffic.rewrites import RewriteSet, load_rewrites, parse_rewrites
from inference_gateway.core.traffic.routing import ModelRouter
from inference_gateway.errors import ConfigError

if TYPE_CHECKING:
    from inference_gateway.telemetry.metrics import GatewayMetrics

__all__ = [
    "Apply",
    "FileConfigSource",
    "KubernetesConfigSource",
    "guard_reload",
    "known_models",
    "load_files",
    "merge_objectives",
]

log = logging.getLogger(__name__)

Apply = Callable[[GatewayConfigSpec | None, RewriteSet], None]

X_GROUP, X_VERSION = "inference.networking.x-k8s.io", "v1alpha2"


def known_models(config: GatewayConfigSpec | None) -> set[str] | None:
    """Names a rewrite may target: the config's models and adapters (None: any)."""
    if config is None or not config.models:
        return None
    return set(ModelRouter(config).models([]))


def load_files(
    config_path: Path | None,
    rewrites_path: str | Path | None,
    *,
    config: GatewayConfigSpec | None = None,
    models: set[str] | None = None,
    seed: int | None = None,
) -> tuple[GatewayConfigSpec | None, RewriteSet]:
    """The state a config file and a rewrites file (or folder) describe, validated:
    `config` stands in when there is no config file, and a rewrite may target the
    config's models, else `models` (None: any). Pure, so a reload runs it in a process
    of its own (`config.reloader.load_off_loop`)."""
    current = load_config(config_path) if config_path is not None else config
    if rewrites_path is None:
        return current, RewriteSet.empty()
    targets = known_models(current) or models
    return current, load_rewrites(rewrites_path, known_models=targets, seed=seed)


def guard_reload(
    reload: Callable[[], Awaitable[None]], metrics: GatewayMetrics | None, source: str = "file"
) -> Callable[[], Awaitable[None]]:
    """`reload` as a file watcher's callback: counted as applied or rejected, and any
    exception turned into a `ConfigError` with its reason, the one kind the watcher
    catches (logs and survives); the last good state keeps serving."""

    async def guarded() -> None:
        try:
            await reload()
        except ConfigError:
            _count(metrics, source, "rejected")
            raise
        except Exception as error:  # unexpected: still a rejected edit, never a dead watcher
            _count(metrics, source, "rejected")
            log.debug("config reload failed", exc_info=True)
            raise ConfigError(f"{source} reload", [f"<root>: {error!r}"]) from None
        _count(metrics, source, "applied")

    return guarded


def _count(metrics: GatewayMetrics | None, source: str, result: str) -> None:
    if metrics is not None:
        metrics.config_reloads.labels(source, result).inc()


def merge_objectives(
    config: GatewayConfigSpec | None, objectives: list[Mapping[str, Any]]
) -> GatewayConfigSpec | None:
    """Add InferenceObjective resources (`spec.priority`, `spec.poolRef.name`) to the
    config's own objectives; the API's win on a name clash. Validated as a whole."""
    if not objectives:
        return config
    base = (config or GatewayConfigSpec()).model_dump(by_alias=True, exclude_none=True)
    merged = {o["name"]: o for o in base.get("objectives", [])}
    for resource in objectives:
        spec = resource.get("spec") or {}
        name = str((resource.get("metadata") or {}).get("name", ""))
        entry: dict[str, Any] = {"name": name, "priority": spec.get("priority", 0)}
        pool = (spec.get("poolRef") or {}).get("name")
        if pool:
            entry["pool"] = pool
        merged[name] = entry
    base["objectives"] = list(merged.values())
    return parse_config(base, "InferenceObjective")


class FileConfigSource:
    """Config and rewrites from files; `start()` loads once (errors raise), then polls."""

    def __init__(
        self,
        apply: Apply,
        config_path: str | Path | None,
        rewrites_path: str | Path | None = None,
        *,
        interval_s: float = 1.0,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.apply = apply
        self.config_path = Path(config_path) if config_path else None
        self.rewrites_path = Path(rewrites_path) if rewrites_path else None
        self.interval_s = interval_s
        self.metrics = metrics
        self.watcher: Any = None
        self._task: asyncio.Task[None] | None = None

    def load(self) -> tuple[GatewayConfigSpec | None, RewriteSet]:
        return load_files(self.config_path, self.rewrites_path)

    async def reload(self) -> None:
        """Read and validate off the event loop (`load_off_loop`), swap in on it."""
        from inference_gateway.config.reloader import load_off_loop

        load = functools.partial(load_files, self.config_path, self.rewrites_path)
        self.apply(*await load_off_loop(load))

    async def start(self) -> None:
        from inference_gateway.config.reloader import FileWatcher

        self.apply(*self.load())  # before serving: in place
        paths = [p for p in (self.config_path, self.rewrites_path) if p is not None]
        if paths:
            reload = guard_reload(self.reload, self.metrics)
            self.watcher = FileWatcher(paths, reload, self.interval_s)
            self._task = asyncio.get_running_loop().create_task(self.watcher.run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)


class KubernetesConfigSource:
    """Watches the three resource kinds; every change rebuilds and re-validates all."""

    def __init__(
        self,
        apply: Apply,
        client: Any,
        namespace: str,
        *,
        config_name: str | None = "igw",
        base: GatewayConfigSpec | None = None,
        backoff_s: tuple[float, float] = (0.2, 30.0),
        metrics: GatewayMetrics | None = None,
    ) -> None:
        from inference_gateway.kubernetes.discovery import CustomObjectSource, Reflector

        self.apply = apply
        self.metrics = metrics
        self.client = client
        self.namespace = namespace
        self.config_name = config_name
        self.base = base
        self.rejected = 0
        self.applied = 0
        self._last_error: str | None = None
        self._pending: set[asyncio.Task[None]] = set()

        def reflector(group: str, version: str, plural: str) -> Reflector:
            source = CustomObjectSource(client, group, version, plural, namespace)
            return Reflector(source, lambda _: self._changed(), backoff_s=backoff_s, name=plural)

        self.configs = reflector(API_GROUP, API_VERSION, "inferencegatewayconfigs")
        self.objectives = reflector(X_GROUP, X_VERSION, "inferenceobjectives")
        self.rewrites = reflector(X_GROUP, X_VERSION, "inferencemodelrewrites")
        self._reflectors = [self.configs, self.objectives, self.rewrites]

    async def start(self) -> None:
        for reflector in self._reflectors:
            reflector.start()

    async def wait_synced(self, timeout_s: float = 10.0) -> None:
        async with asyncio.timeout(timeout_s):
            for reflector in self._reflectors:
                await reflector.synced.wait()

    def is_synced(self) -> bool:
        """Every watched kind has been listed once (the config applied from it)."""
        return all(r.synced.is_set() for r in self._reflectors)

    async def stop(self) -> None:
        for reflector in self._reflectors:
            await reflector.stop()

    def served_resource(self) -> dict[str, Any] | None:
        """The InferenceGatewayConfig this source reads (its status is written back)."""
        return self._config_resource()

    @property
    def last_error(self) -> str | None:
        """Why the current resource was rejected; None while it is the one served."""
        return self._last_error

    def _config_resource(self) -> dict[str, Any] | None:
        items = list(self.configs.objects.values())
        if self.config_name is not None:
            items = [o for o in items if o["metadata"].get("name") == self.config_name]
        return min(items, key=lambda o: o["metadata"].get("name", "")) if items else None

    def _changed(self) -> None:
        if not all(r.lists for r in self._reflectors):
            return  # wait for every initial list: a partial view is not a state
        resource = self._config_resource()
        culprit = resource
        try:
            config = (
                parse_config(resource, f"InferenceGatewayConfig/{resource['metadata']['name']}")
                if resource is not None
                else self.base
            )
            culprit = None
            objectives: list[Mapping[str, Any]] = list(self.objectives.objects.values())
            config = merge_objectives(config, objectives)
            rewrite_docs = list(self.rewrites.objects.values())
            culprit = rewrite_docs[0] if rewrite_docs else None
            rewrites = parse_rewrites(
                rewrite_docs, known_models=known_models(config), source="InferenceModelRewrite"
            )
        except ConfigError as error:
            self._reject(error, culprit)
            return
        self.apply(config, rewrites)
        self.applied += 1
        _count(self.metrics, "kubernetes", "applied")
        self._last_error = None

    def _reject(self, error: ConfigError, resource: Mapping[str, Any] | None) -> None:
        self.rejected += 1
        _count(self.metrics, "kubernetes", "rejected")
        message = f"rejected invalid {error.source}: " + "; ".join(error.problems)
        log.error("%s; still serving the last good config", message)
        if resource is not None and message != self._last_error:
            self._last_error = message
            task = asyncio.get_running_loop().create_task(self._event(resource, message))
            self._pending.add(task)  # keep a reference until it is done
            task.add_done_callback(self._pending.discard)

    async def _event(self, resource: Mapping[str, Any], message: str) -> None:
        """A Warning Event on the resource; best effort (RBAC may not allow it)."""
        from kubernetes_asyncio.client import CoreV1Api

        meta = resource.get("metadata") or {}
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{meta.get('name', 'config')}.",
                "namespace": self.namespace,
            },
            "involvedObject": {
                "apiVersion": resource.get("apiVersion"),
                "kind": resource.get("kind"),
                "name": meta.get("name"),
                "namespace": self.namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": "InvalidConfig",
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": "igw-picker"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            # unparsed (`_preload_content=False`): the raw response, released unread
            response: Any = await CoreV1Api(self.client).create_namespaced_event(
                self.namespace,
                body,  # type: ignore[arg-type]  # a plain dict, as the client accepts
                _preload_content=False,
            )
            response.release()
        except Exception as error:  # an Event is a courtesy, never a failure
            log.debug("could not record an Event: %r", error)
