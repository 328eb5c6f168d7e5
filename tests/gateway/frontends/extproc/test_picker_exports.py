"""The public API of the picker's modules, pinned; and the core's independence from them."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

EXPORTS = {
    "inference_gateway.frontends.extproc.picker": [
        "Exchange",
        "ExtProcServicer",
        "PickerOptions",
        "UsageScanner",
    ],
    "inference_gateway.frontends.extproc.stream": [
        "BODY_BUDGET_BYTES",
        "BodyBudget",
        "CallChannel",
        "Channel",
        "ContextChannel",
        "FULL_DUPLEX",
        "MAX_BODY_BYTES",
        "MESSAGE_KINDS",
        "Processor",
        "Responses",
        "drive",
        "max_message",
    ],
    "inference_gateway.assembly.picker": [
        "LIVENESS_SERVICE",
        "Lifecycle",
        "PROCESS_PATH",
        "PickerServer",
        "READINESS_SERVICE",
        "SERVICE_NAME",
        "TRANSPORTS",
        "build_picker",
    ],
    "inference_gateway.transport.http2_server": [
        "Call",
        "ConnectionPolicy",
        "GrpcCode",
        "Handler",
        "HealthService",
        "Http2GrpcServer",
        "Method",
        "parse_grpc_timeout",
        "ssl_context",
    ],
    "inference_gateway.core.request.director": [
        "CLIENT_ID_HEADER",
        "Decision",
        "Director",
        "Intake",
        "Pending",
        "Rejection",
        "RequestLifecycle",
        "RoutingState",
        "SchedulerLike",
        "Series",
    ],
    "inference_gateway.core.request.body": [
        "CLIENT_ID_HEADER",
        "MAX_MODEL_BYTES",
        "OutputBound",
        "api_key_of",
        "check_model",
        "model_of",
        "output_bound",
        "parse_body",
        "prompt_text",
    ],
    "inference_gateway.frontends.bbr": [
        "BASE_MODEL_HEADER",
        "BodyRouter",
        "MODEL_HEADER",
        "model_headers",
        "serve_call",
        "start_bbr",
    ],
    "inference_gateway.kubernetes.discovery": [
        "CustomObjectSource",
        "LeaderElector",
        "PodDiscovery",
        "PodSource",
        "PoolTarget",
        "Reflector",
        "Source",
        "WatchExpired",
        "api_client",
        "pod_endpoints",
        "pod_ready",
        "read_inference_pool",
        "selector_query",
    ],
    "inference_gateway.assembly.config_watch": [
        "Apply",
        "FileConfigSource",
        "KubernetesConfigSource",
        "guard_reload",
        "known_models",
        "load_files",
        "merge_objectives",
    ],
}


@pytest.mark.parametrize("module", sorted(EXPORTS))
def test_public_api(module: str) -> None:
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == EXPORTS[module]
    for name in mod.__all__:
        assert getattr(mod, name) is not None


def test_discovery_and_live_config_import_no_data_plane() -> None:
    """The core never imports a data plane or gRPC (DESIGN §2)."""
    code = (
        "import sys, inference_gateway.kubernetes.discovery; "
        "import inference_gateway.assembly.config_watch; "
        "bad = [m for m in sys.modules "
        "if m == 'grpc' or m.startswith(('inference_gateway.frontends', "
        "'inference_gateway.transport'))]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
