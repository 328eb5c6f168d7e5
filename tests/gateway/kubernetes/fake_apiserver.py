"""An in-process fake Kubernetes API server (aiohttp on loopback) for discovery tests.

It implements what a list/watch client relies on, with the real semantics:

* one cluster-wide resourceVersion counter; every write bumps it and stamps the object;
* list returns the collection and `metadata.resourceVersion`;
* `?watch=true&resourceVersion=N` replays every change after N, then streams new ones
  as JSON lines until `timeoutSeconds` or until the test drops the watches;
* after `compact()`, a watch from a version older than the compaction gets an
  `ERROR` event with a `Status` of code 410 (Gone), as etcd compaction causes;
* label selectors in the API's full syntax (kubernetes.io "Labels and Selectors"):
  equality `a=b`, `a==b`, `a!=b` and set-based `a in (x,y)`, `a notin (x,y)`, `a`, `!a`,
  ANDed by commas; a selector it cannot parse is answered 400, as the API server does
  (not a match-everything); a filtered watch sees an object relabelled into its selector
  as ADDED and out of it as DELETED, as the API server's watch cache sends them;
* Leases with optimistic concurrency (409 on a stale resourceVersion); Events are
  recorded for assertions;
* `PATCH .../{plural}/{name}/status` with `application/merge-patch+json` (RFC 7386)
  changes `.status` only, as the API server does for a resource whose CRD declares the
  status subresource; patches are recorded for assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
import ssl
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

#: One parsed requirement: (key, operator, values), operator one of
#: `in`, `notin`, `exists`, `!exists` (`=`/`==` parse as `in`, `!=` as `notin`).
Requirement = tuple[str, str, frozenset[str]]

_SET_TERM = re.compile(r"^([^\s!=(),]+)\s+(in|notin)\s+\(([^()]*)\)$")
_EQUALITY_TERM = re.compile(r"^([^\s!=(),]+)\s*(==|!=|=)\s*([^\s!=(),]*)$")
_KEY = re.compile(r"^[^\s!=(),]+$")


@dataclass
class _Watch:
    collection: str
    selector: list[Requirement]
    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)


class SelectorError(ValueError):
    """A `labelSelector` the API server would refuse (HTTP 400)."""


def _terms(text: str) -> list[str]:
    """Split on the commas outside parentheses."""
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t.strip() for t in terms if t.strip()]


def parse_selector(text: str) -> list[Requirement]:
    out: list[Requirement] = []
    for term in _terms(text):
        if match := _SET_TERM.match(term):
            values = frozenset(v.strip() for v in match[3].split(","))
            if "" in values:
                raise SelectorError(f"empty value in {term!r}")
            out.append((match[1], match[2], values))
        elif match := _EQUALITY_TERM.match(term):
            out.append((match[1], "notin" if match[2] == "!=" else "in", frozenset([match[3]])))
        elif term.startswith("!") and _KEY.match(term[1:]):
            out.append((term[1:], "!exists", frozenset()))
        elif _KEY.match(term):
            out.append((term, "exists", frozenset()))
        else:
            raise SelectorError(f"unable to parse requirement: {term!r}")
    return out


def _matches(obj: dict[str, Any], selector: list[Requirement]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for key, operator, values in selector:
        held = {
            "in": labels.get(key) in values,
            "notin": labels.get(key) not in values,  # also true without the key
            "exists": key in labels,
            "!exists": key not in labels,
        }[operator]
        if not held:
            return False
    return True


def _seen_as(
    change: tuple[str, dict[str, Any], dict[str, Any] | None], selector: list[Requirement]
) -> dict[str, Any] | None:
    """The event a selector-filtered watch gets for one change, as the API server's watch
    cache sends it: an object relabelled into the selector is ADDED, one relabelled out
    of it is DELETED, an object outside it before and after is not seen."""
    kind, obj, previous = change
    now = _matches(obj, selector)
    before = previous is not None and _matches(previous, selector)
    if kind == "MODIFIED" and now != before:
        kind = "ADDED" if now else "DELETED"
    elif not now and not (kind == "DELETED" and before):
        return None
    return {"type": kind, "object": copy.deepcopy(obj)}


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386): null deletes, objects merge, anything else replaces."""
    out = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class FakeApiServer:
    def __init__(self) -> None:
        self.version = 100
        self.collections: dict[str, dict[str, dict[str, Any]]] = {}
        # rv, collection, (type, object, the object before a MODIFIED)
        self.history: list[tuple[int, str, tuple[str, dict[str, Any], dict[str, Any] | None]]]
        self.history = []
        self.compacted = 0
        self.watches: list[_Watch] = []
        self.requests: list[str] = []
        self.events: list[dict[str, Any]] = []
        self.status_patches: list[tuple[str, dict[str, Any]]] = []  # content type, body
        self.gone_served = 0  # watches answered 410 Gone
        self.fail_next = 0  # answer this many list/watch requests with 500
        self._runner: web.AppRunner | None = None
        self._token: str | None = None
        self.url = ""

    # ------------------------------------------------------------------ test controls

    def put(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.version)
        items = self.collections.setdefault(collection, {})
        previous = items.get(meta["name"])
        items[meta["name"]] = obj
        self._emit(collection, "ADDED" if previous is None else "MODIFIED", obj, previous)
        return obj

    def delete(self, collection: str, name: str) -> None:
        self.version += 1
        obj = self.collections[collection].pop(name)
        obj["metadata"]["resourceVersion"] = str(self.version)
        self._emit(collection, "DELETED", obj)

    def compact(self) -> None:
        """Forget history: watches from older versions now get 410 Gone."""
        self.compacted = self.version
        self.history.clear()

    def drop_watches(self) -> None:
        for watch in self.watches:
            watch.queue.put_nowait(None)

    def _emit(
        self,
        collection: str,
        kind: str,
        obj: dict[str, Any],
        previous: dict[str, Any] | None = None,
    ) -> None:
        change = (kind, copy.deepcopy(obj), copy.deepcopy(previous))
        self.history.append((self.version, collection, change))
        for watch in self.watches:
            if watch.collection == collection and (event := _seen_as(change, watch.selector)):
                watch.queue.put_nowait(event)

    # ------------------------------------------------------------------ server

    async def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        ssl_context: ssl.SSLContext | None = None,
        token: str | None = None,
    ) -> str:
        """Serve on HOST:PORT; with SSL_CONTEXT over TLS, and with TOKEN answering 401 to
        a request without `Authorization: Bearer TOKEN`, as the API server does for an
        unauthenticated client."""
        app = web.Application(middlewares=[self._authenticate] if token else [])
        self._token = token
        app.router.add_get("/api/v1/namespaces/{ns}/pods", self.collection)
        app.router.add_post("/api/v1/namespaces/{ns}/events", self.create_event)
        leases = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
        app.router.add_post(leases, self.create)
        app.router.add_get(leases + "/{name}", self.read)
        app.router.add_put(leases + "/{name}", self.replace)
        app.router.add_get("/apis/{group}/{version}/namespaces/{ns}/{plural}", self.collection)
        app.router.add_patch(
            "/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}/status", self.patch_status
        )
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_context)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"{'https' if ssl_context else 'http'}://{host}:{port}"
        return self.url

    @web.middleware
    async def _authenticate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self._token}":
            self.requests.append(f"401 {request.path_qs}")
            status = {"kind": "Status", "code": 401, "reason": "Unauthorized"}
            return web.json_response(status, status=401)
        response: web.StreamResponse = await handler(request)
        return response

    async def stop(self) -> None:
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()

    async def collection(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request.path_qs)
        if self.fail_next:
            self.fail_next -= 1
            return web.json_response({"kind": "Status", "code": 500}, status=500)
        path = request.path
        try:
            selector = parse_selector(request.query.get("labelSelector", ""))
        except SelectorError as error:
            return web.json_response(
                {"kind": "Status", "code": 400, "reason": "BadRequest", "message": str(error)},
                status=400,
            )
        if request.query.get("watch") in ("true", "1", "True"):
            return await self._watch(request, path, selector)
        items = [o for o in self.collections.get(path, {}).values() if _matches(o, selector)]
        return web.json_response(
            {"kind": "List", "metadata": {"resourceVersion": str(self.version)}, "items": items}
        )

    async def _watch(
        self, request: web.Request, path: str, selector: list[Requirement]
    ) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or 0)
        timeout = float(request.query.get("timeoutSeconds") or 300)
        response = web.StreamResponse(headers={"content-type": "application/json"})
        await response.prepare(request)
        if since < self.compacted:
            self.gone_served += 1
            gone = {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "status": "Failure",
                    "reason": "Expired",
                    "code": 410,
                    "message": f"too old resource version: {since} ({self.compacted})",
                },
            }
            await response.write(orjson.dumps(gone) + b"\n")
            await response.write_eof()
            return response
        watch = _Watch(path, selector)
        for version, collection, change in self.history:
            if version > since and collection == path and (event := _seen_as(change, selector)):
                watch.queue.put_nowait(event)
        self.watches.append(watch)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    event = await watch.queue.get()
                    if event is None:
                        break
                    await response.write(orjson.dumps(event) + b"\n")
        except TimeoutError:
            pass
        finally:
            self.watches.remove(watch)
        with contextlib.suppress(ConnectionError):  # the client may be gone already
            await response.write_eof()
        return response

    # ------------------------------------------------------------------ leases, events

    def _lease_key(self, request: web.Request) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{request.match_info['ns']}/leases"

    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        key = self._lease_key(request)
        if body["metadata"]["name"] in self.collections.get(key, {}):
            return web.json_response({"kind": "Status", "code": 409}, status=409)
        return web.json_response(self.put(key, body), status=201)

    async def read(self, request: web.Request) -> web.Response:
        obj = self.collections.get(self._lease_key(request), {}).get(request.match_info["name"])
        if obj is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response(obj)

    async def replace(self, request: web.Request) -> web.Response:
        body = await request.json()
        key = self._lease_key(request)
        current = self.collections.get(key, {}).get(request.match_info["name"])
        if current is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return web.json_response({"kind": "Status", "code": 409}, status=409)
        return web.json_response(self.put(key, body))

    async def patch_status(self, request: web.Request) -> web.Response:
        if request.content_type != "application/merge-patch+json":
            return web.json_response({"kind": "Status", "code": 415}, status=415)
        body = await request.json()
        self.status_patches.append((request.content_type, body))
        info = request.match_info
        key = f"/apis/{info['group']}/{info['version']}/namespaces/{info['ns']}/{info['plural']}"
        current = self.collections.get(key, {}).get(info["name"])
        if current is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        updated = copy.deepcopy(current)
        updated["status"] = _merge(current.get("status") or {}, body.get("status") or {})
        return web.json_response(self.put(key, updated))

    async def create_event(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.events.append(body)
        return web.json_response(body, status=201)


def pod(
    name: str,
    ip: str | None = "10.0.0.1",
    *,
    ready: bool = True,
    labels: dict[str, str] | None = None,
    namespace: str = "igw",
) -> dict[str, Any]:
    """A Pod object as the API returns it (only the fields discovery reads)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": "vllm"}},
        "status": {
            "phase": "Running",
            **({"podIP": ip} if ip else {}),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }
