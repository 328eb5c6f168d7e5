"""Every server's default port, in one table (README.md, "Default ports", shows it; a
test holds the commands' flags and the README to it).

None takes a port a neighbour on the same host listens on by default: Prometheus 9090
(and its Pushgateway 9091, Alertmanager 9093), Envoy's admin 9901 and its examples'
listener 10000, vLLM's server 8000. The one exception is deliberate: the P/D sidecar
takes vLLM's own 8000 in a decode pod, as llm-d's routing sidecar does, and vLLM moves
to 8200 behind it. Ports the cluster uses are set by the charts explicitly (the picker's
metrics port is upstream's 9090 there, each pod having its own network namespace).
"""

from __future__ import annotations

__all__ = ["DEFAULTS", "NEIGHBOURS"]

#: (command, flag) → default port
DEFAULTS = {
    ("igw serve", "--port"): 8080,
    ("igw emulate", "--port"): 8001,
    ("igw global", "--port"): 8090,
    ("igw picker", "--grpc-port"): 9002,  # upstream's endpoint picker
    ("igw picker", "--metrics-port"): 9005,
    ("igw bbr", "--grpc-port"): 9004,  # upstream's body-based router
    ("igw auth", "--port"): 9010,
    ("igw pd-sidecar", "--listen"): 8000,  # vLLM's port in a decode pod, on purpose
}

#: well-known default ports of what runs beside the gateway
NEIGHBOURS = {
    8000: "vLLM",
    9090: "Prometheus",
    9091: "Prometheus Pushgateway",
    9093: "Alertmanager",
    9901: "Envoy admin",
    10000: "Envoy (examples' listener)",
}
