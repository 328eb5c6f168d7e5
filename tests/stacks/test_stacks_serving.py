"""What a real cluster needs from the CDK side to serve (issue 16): health checks that see
TLS, Pod Identity for the add-ons and model servers, images from the region's own
registry, Karpenter's AWS half."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from conftest import Synth

GITOPS = Path(__file__).resolve().parents[2] / "gitops" / "environments"


def _rendered(env_name: str) -> list[dict]:
    out: list[dict] = []
    for path in sorted((GITOPS / env_name / "rendered").glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return out


# --- ingress health ------------------------------------------------------------------


def test_nlb_health_check_completes_a_tls_handshake_with_envoy(any_synth: Synth) -> None:
    """A TCP health check only opens a connection, so it stays green while every TLS
    handshake fails (Envoy's `filter_chain_not_found`); an HTTPS health check completes
    the handshake and needs an HTTP answer (ELB docs, "Health checks for Network Load
    Balancer target groups": HTTPS checks on TLS target groups, matcher 200-599 allowed).
    It asks the port the NLB sends traffic to, which is Envoy's HTTPS listener in the
    rendered Gateway (Envoy Gateway maps listener 443 to container port 10443)."""
    for region in any_synth.env.aws.regions:
        groups = any_synth.resources(region, "ingress", "AWS::ElasticLoadBalancingV2::TargetGroup")
        (group,) = groups.values()
        props = group["Properties"]
        assert props["Protocol"] == "TLS"
        assert props["Port"] == any_synth.env.ingress.target_port
        assert props["HealthCheckProtocol"] == "HTTPS"
        assert props.get("HealthCheckPort", "traffic-port") == "traffic-port"
        low, _, high = props["Matcher"]["HttpCode"].partition("-")
        # Envoy answering at all (404 for an unrouted path, 401 without a key) is healthy;
        # a 5xx is not.
        assert int(low) == 200 and 404 <= int(high) < 500
    (gateway,) = [d for d in _rendered(any_synth.name) if d["kind"] == "Gateway"]
    assert [(x["protocol"], x["port"]) for x in gateway["spec"]["listeners"]] == [("HTTPS", 443)]
