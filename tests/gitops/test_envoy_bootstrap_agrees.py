"""The Envoy bootstrap the tests, demo and benchmark run equals what the tree asks for.

`inference_gateway.envoyproxy.bootstrap.render(charts.gateway.envoy_settings(env))` is
the config Envoy Gateway v1.5 + Envoy AI Gateway v0.4 would give Envoy for an
environment; the committed tree (`gitops/environments/<env>/rendered/`) is what they
would actually read. This test reads the tree, not the chart code, and fails where the
two disagree: pools and their pickers, ports, route timeouts, processing modes, message
timeouts, fail-closed, circuit breakers, the picker-outage override and the `/status`
heartbeat route. The upstream rules each comparison relies on:

* ai-gateway v0.4.0 `internal/extensionserver/inferencepool.go`: one picker ext_proc per
  InferencePool to `endpointPickerRef` (`<svc>.<ns>.svc:<port>`), SEND everywhere, body
  FULL_DUPLEX_STREAMED unless the pool's `aigateway.envoyproxy.io/processing-body-mode`
  says `buffered`, 300 s, `FailureModeAllow: false`, TLS + HTTP/2;
  `post_translate_modify.go`: each route disables every other pool's picker filter;
  `post_cluster_modify.go`: the route cluster is ORIGINAL_DST on
  `x-gateway-destination-endpoint`.
* gateway v1.5.0 `internal/xds/translator/extproc.go` (processing mode, message
  timeout, failOpen), `route.go` (timeouts.request → route timeout), `cluster.go`
  (circuitBreaker → thresholds), `custom_response.go` (responseOverride), and the
  privileged-port shift of a Gateway listener (P → P + 10000); an HTTPRoute `method`
  is matched as the `:method` header, and a route to a Service gets that Service's
  port as its cluster; `post_translate_modify.go` patchVirtualHostWithInferencePool
  disables every picker filter on a route whose backend is no pool.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from charts.app import environment_names
from charts.gateway import envoy_settings
from envspec.environment import load_environment
from inference_gateway.envoyproxy.bootstrap import (
    bbr_filter_name,
    custom_response_filter_name,
    picker_cluster_name,
    picker_filter_name,
    render,
    route_cluster_name,
)
from inference_gateway.envoyproxy.process import envoy_binary

Doc = dict[str, Any]
ENVS = environment_names()
BODY_MODES = {
    "Buffered": "BUFFERED",
    "Streamed": "STREAMED",
    "FullDuplexStreamed": ("FULL_DUPLEX_STREAMED"),
}


def _tree(gitops_dir: Path, env: str) -> list[Doc]:
    docs: list[Doc] = []
    for path in sorted((gitops_dir / "environments" / env / "rendered").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _seconds(value: str) -> float:
    assert value.endswith("s"), value
    return float(value[:-1])


def _by_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d.get("kind") == kind]


def _hcm(bootstrap: Doc) -> Doc:
    (listener,) = bootstrap["static_resources"]["listeners"]
    return dict(listener["filter_chains"][0]["filters"][0]["typed_config"])


def disagreements(docs: list[Doc], bootstrap: Doc) -> list[str]:
    """Every place the rendered tree and the bootstrap differ, as readable lines."""
    out: list[str] = []
    hcm = _hcm(bootstrap)
    filters = {f["name"]: f for f in hcm["http_filters"]}
    clusters = {c["name"]: c for c in bootstrap["static_resources"]["clusters"]}
    routes = hcm["route_config"]["virtual_hosts"][0]["routes"]
    pools = {d["metadata"]["name"]: d for d in _by_kind(docs, "InferencePool")}

    # pools and their pickers
    picker_filters = {n for n in filters if n.startswith("envoy.filters.http.ext_proc/endpoint")}
    want = {picker_filter_name(n, d["metadata"]["namespace"]) for n, d in pools.items()}
    if picker_filters != want:
        out.append(f"picker filters {sorted(picker_filters)} != pools {sorted(want)}")
    for name, pool in pools.items():
        ns = pool["metadata"]["namespace"]
        ref = pool["spec"]["endpointPickerRef"]
        cluster = clusters.get(picker_cluster_name(name, ns))
        if cluster is None:
            out.append(f"pool {name}: no picker cluster")
            continue
        address = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"][
            "address"
        ]["socket_address"]
        if (address["address"], address["port_value"]) != (ref["name"], ref["port"]["number"]):
            out.append(f"pool {name}: picker cluster {address} != endpointPickerRef {ref}")
        if "transport_socket" not in cluster:
            out.append(f"pool {name}: picker cluster without TLS")
        config = filters.get(picker_filter_name(name, ns), {}).get("typed_config", {})
        annotation = (
            pool["metadata"]
            .get("annotations", {})
            .get("aigateway.envoyproxy.io/processing-body-mode", "duplex")
        )
        body = "BUFFERED" if annotation == "buffered" else "FULL_DUPLEX_STREAMED"
        mode = config.get("processing_mode", {})
        if (mode.get("request_body_mode"), mode.get("response_body_mode")) != (body, body):
            out.append(f"pool {name}: picker body modes {mode} != {body}")
        if config.get("failure_mode_allow") is not False:
            out.append(f"pool {name}: picker filter does not fail closed")
        authority = config.get("grpc_service", {}).get("envoy_grpc", {}).get("authority")
        if authority != f"{ref['name']}.{ns}.svc:{ref['port']['number']}":
            out.append(f"pool {name}: picker authority {authority}")

    # HTTPRoutes: timeouts and per-route picker enablement; a pool's matches and its
    # ORIGINAL_DST cluster, or a Service's (the `/status` heartbeat) exact path, method
    # and port
    for route in _by_kind(docs, "HTTPRoute"):
        (rule,) = route["spec"]["rules"]
        (backend,) = rule["backendRefs"]
        name, ns = route["metadata"]["name"], route["metadata"]["namespace"]
        mine = [r for r in routes if r["name"].startswith(f"httproute/{ns}/{name}/rule/0/")]
        if not mine:
            out.append(f"route {name}: not in the bootstrap")
        to_pool = backend.get("kind") == "InferencePool"
        own = {picker_filter_name(backend["name"], ns)} if to_pool else set()
        timeout = _seconds(rule["timeouts"]["request"])
        for r in mine:
            if _seconds(r["route"]["timeout"]) != timeout:
                out.append(f"route {name}: timeout {r['route']['timeout']} != {timeout}s")
            disabled = {k for k, v in r["typed_per_filter_config"].items() if v.get("disabled")}
            if disabled != picker_filters - own:
                out.append(f"route {name}: disabled pickers {sorted(disabled)}")
        cluster = clusters.get(route_cluster_name(ns, name), {})
        if to_pool:
            out += _pool_route(name, rule, mine, cluster)
        else:
            out += _service_route(name, rule, backend, mine, cluster)

    # the body-based router's EnvoyExtensionPolicy
    for policy in _by_kind(docs, "EnvoyExtensionPolicy"):
        ns, pname = policy["metadata"]["namespace"], policy["metadata"]["name"]
        (ext,) = policy["spec"]["extProc"]
        (ref,) = ext["backendRefs"]
        config = filters.get(bbr_filter_name(ns, pname), {}).get("typed_config")
        if config is None:
            out.append(f"{pname}: no body-based router filter")
            continue
        cluster = clusters[config["grpc_service"]["envoy_grpc"]["cluster_name"]]
        address = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"][
            "address"
        ]["socket_address"]
        if (address["address"], address["port_value"]) != (ref["name"], ref["port"]):
            out.append(f"{pname}: router cluster {address} != backendRef {ref}")
        if config["message_timeout"] != ext["messageTimeout"]:
            out.append(f"{pname}: message timeout {config['message_timeout']}")
        body = BODY_MODES[ext["processingMode"]["request"]["body"]]
        if config["processing_mode"]["request_body_mode"] != body:
            out.append(f"{pname}: request body mode {config['processing_mode']}")
        if config["failure_mode_allow"] != ext.get("failOpen", False):
            out.append(f"{pname}: failOpen {ext.get('failOpen')}")
        for r in routes:  # targets the Gateway: enabled on every route
            if bbr_filter_name(ns, pname) not in r["typed_per_filter_config"]:
                out.append(f"{pname}: not enabled on {r['name']}")

    # the inference routes' BackendTrafficPolicy
    for policy in _by_kind(docs, "BackendTrafficPolicy"):
        ns, pname = policy["metadata"]["namespace"], policy["metadata"]["name"]
        spec = policy["spec"]
        cb = spec["circuitBreaker"]
        want_cb = {
            "priority": "DEFAULT",
            "max_connections": cb["maxConnections"],
            "max_pending_requests": cb["maxPendingRequests"],
            "max_requests": cb["maxParallelRequests"],
            "max_retries": cb["maxParallelRetries"],
        }
        for ref in spec["targetRefs"]:
            cluster = clusters.get(route_cluster_name(ns, ref["name"]), {})
            if cluster.get("circuit_breakers", {}).get("thresholds") != [want_cb]:
                out.append(f"{pname}: thresholds of {ref['name']} != {want_cb}")
        overrides = spec.get("responseOverride", [])
        custom = filters.get(custom_response_filter_name(ns, pname))
        if bool(overrides) != bool(custom):
            out.append(f"{pname}: responseOverride {bool(overrides)}, filter {bool(custom)}")
        for ro in overrides:
            assert custom is not None
            (matcher,) = custom["typed_config"]["custom_response_matcher"]["matcher_list"][
                "matchers"
            ]
            predicate = matcher["predicate"]
            single = predicate.get("or_matcher", {}).get("predicate") or [predicate]
            codes = [int(p["single_predicate"]["value_match"]["exact"]) for p in single]
            if codes != [c["value"] for c in ro["match"]["statusCodes"]]:
                out.append(f"{pname}: override codes {codes}")
            action = matcher["on_match"]["action"]["typed_config"]
            if action["body_format"]["text_format"] != ro["response"]["body"]["inline"]:
                out.append(f"{pname}: override body differs")
            header = action["response_headers_to_add"][0]["header"]
            if header["value"] != ro["response"]["contentType"]:
                out.append(f"{pname}: override content type {header['value']}")
            json.loads(ro["response"]["body"]["inline"])  # the body is JSON

    # the Gateway's listener port, and the picker thresholds patched into the bootstrap
    for gateway in _by_kind(docs, "Gateway"):
        (listener,) = gateway["spec"]["listeners"]
        (bound,) = bootstrap["static_resources"]["listeners"]
        if bound["address"]["socket_address"]["port_value"] != listener["port"] + 10000:
            out.append(f"listener port {bound['address']} != {listener['port']} + 10000")
    for proxy in _by_kind(docs, "EnvoyProxy"):
        patches = proxy["spec"].get("bootstrap", {}).get("jsonPatches", [])
        runtime = {p["path"].rsplit("/", 1)[1]: p["value"] for p in patches}
        if runtime != bootstrap["layered_runtime"]["layers"][0]["static_layer"]:
            out.append("picker circuit-breaker runtime keys differ")
    return out


def _pool_route(name: str, rule: Doc, mine: list[Doc], cluster: Doc) -> list[str]:
    """A route to a pool: its model matches, its cluster ORIGINAL_DST on the header."""
    out: list[str] = []
    models = sorted(h["value"] for m in rule["matches"] for h in m.get("headers", []) if h["type"])
    got = sorted(h["string_match"]["exact"] for r in mine for h in r["match"].get("headers", []))
    if got != models:
        out.append(f"route {name}: models {got} != {models}")
    header = cluster.get("original_dst_lb_config", {}).get("http_header_name")
    if (cluster.get("type"), header) != ("ORIGINAL_DST", "x-gateway-destination-endpoint"):
        out.append(f"route {name}: cluster {cluster.get('type')} on {header}")
    return out


def _service_route(name: str, rule: Doc, backend: Doc, mine: list[Doc], cluster: Doc) -> list[str]:
    """A route to a Service (the heartbeat): an exact path with its method as the
    `:method` header, the inference routes' override off, its cluster the Service's port."""
    out: list[str] = []
    for r, m in zip(mine, rule["matches"], strict=False):
        want = {
            "path": m["path"]["value"],
            "headers": [{"name": ":method", "string_match": {"exact": m["method"]}}],
        }
        if m["path"]["type"] != "Exact" or r["match"] != want:
            out.append(f"route {name}: match {r['match']} != {m}")
        if any("custom_response" in k for k in r["typed_per_filter_config"]):
            out.append(f"route {name}: the inference routes' override is on")
    endpoints = cluster.get("load_assignment", {}).get("endpoints", [{}])
    address = endpoints[0].get("lb_endpoints", [{}])[0].get("endpoint", {}).get("address")
    socket = {"socket_address": {"address": backend["name"], "port_value": backend["port"]}}
    if address != socket:
        out.append(f"route {name}: backend {address} != {backend}")
    return out


@pytest.fixture(params=ENVS)
def env_tree(request: pytest.FixtureRequest, gitops_dir: Path) -> tuple[list[Doc], Doc]:
    name = str(request.param)
    env = load_environment(gitops_dir / "environments" / name / "environment.yaml")
    return _tree(gitops_dir, name), render(envoy_settings(env))


def test_the_tree_and_the_bootstrap_agree(env_tree: tuple[list[Doc], Doc]) -> None:
    docs, bootstrap = env_tree
    assert _by_kind(docs, "InferencePool"), "nothing to compare"
    assert disagreements(docs, bootstrap) == []


@pytest.mark.parametrize(
    ("kind", "edit", "says"),
    [
        (
            "HTTPRoute/igw-status-route",
            lambda d: d["spec"]["rules"][0]["backendRefs"][0].update(port=1),
            "backend",
        ),
        (
            "HTTPRoute/igw-status-route",
            lambda d: d["spec"]["rules"][0]["matches"][0].update(method="POST"),
            "match",
        ),
        (
            "HTTPRoute",
            lambda d: d["spec"]["rules"][0].update(timeouts={"request": "30s"}),
            "timeout",
        ),
        (
            "InferencePool",
            lambda d: d["spec"]["endpointPickerRef"]["port"].update(number=1),
            "picker",
        ),
        (
            "EnvoyExtensionPolicy",
            lambda d: d["spec"]["extProc"][0]["processingMode"]["request"].update(body="Buffered"),
            "body mode",
        ),
        (
            "EnvoyExtensionPolicy",
            lambda d: d["spec"]["extProc"][0].update(messageTimeout="9s"),
            "timeout",
        ),
        ("BackendTrafficPolicy", lambda d: d["spec"].pop("responseOverride"), "responseOverride"),
        (
            "InferencePool",
            lambda d: (
                d["metadata"]
                .setdefault("annotations", {})
                .update({"aigateway.envoyproxy.io/processing-body-mode": "buffered"})
            ),
            "body modes",
        ),
    ],
    ids=[
        "status-port",
        "status-method",
        "route-timeout",
        "picker-port",
        "bbr-mode",
        "bbr-timeout",
        "override",
        "pool-mode",
    ],
)
def test_a_changed_tree_is_caught(
    env_tree: tuple[list[Doc], Doc], kind: str, edit: Any, says: str
) -> None:
    """`kind`: the first document of that kind, or `Kind/name` that one."""
    docs, bootstrap = env_tree
    docs = copy.deepcopy(docs)
    kind, _, name = kind.partition("/")
    edit(next(d for d in docs if d.get("kind") == kind and name in ("", d["metadata"]["name"])))
    assert any(says in line for line in disagreements(docs, bootstrap))


def test_envoy_accepts_the_bootstrap(env_tree: tuple[list[Doc], Doc], tmp_path: Path) -> None:
    """Envoy 1.40 itself validates every environment's bootstrap (`--mode validate`)."""
    _, bootstrap = env_tree
    path = tmp_path / "bootstrap.json"
    path.write_text(json.dumps(bootstrap))
    result = subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "-c", str(path), "--disable-hot-restart"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
