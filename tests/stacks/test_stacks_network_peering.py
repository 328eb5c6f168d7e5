"""The cross-region network: disjoint VPC CIDRs, a VPC peering between every pair of an
environment's regions, routes for the peer CIDR in every private route table of both
sides, and the Envoy NLB open to the peer region's routers on its listener port only.

Upstream rules these tests hold the stacks to:
* "The requester VPC and accepter VPC cannot have overlapping CIDR blocks" and "If the
  requester and acceptor VPCs are in the same account, the peering request is accepted
  without a peering role" (CloudFormation reference, AWS::EC2::VPCPeeringConnection):
  overlapping ranges are refused at load time, and no accepter resource is built.
* "You cannot reference the security group of a peer VPC that's in a different Region"
  (Amazon VPC Peering Guide, VPC peering limitations): the Envoy rule names the CIDR.

cdk-nag and cfn-lint run over these templates with the rest of the environment
(tests/stacks/test_stacks_synth.py).
"""

from __future__ import annotations

import ipaddress
import itertools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from envspec.environment import EnvironmentSpec, load_environment
from inference_gateway.errors import ConfigError
from stacks.application import build, new_app
from stacks.parts.peering import ENVOY_LISTENER_PORT

if TYPE_CHECKING:
    from conftest import Synth

REPO = Path(__file__).resolve().parents[2]
PROD = REPO / "gitops/environments/prod/environment.yaml"
PEERING = "AWS::EC2::VPCPeeringConnection"


def _export_values(synth: Synth, region: str, part: str) -> dict[str, Any]:
    """Export name -> exported value of one stack (same-region references)."""
    outputs = synth.raw(region, part).get("Outputs", {})
    return {o["Export"]["Name"]: o["Value"] for o in outputs.values() if "Export" in o}


def _imported(synth: Synth, region: str, part: str, value: Any) -> Any:
    """What an `Fn::ImportValue` of `part`'s export resolves to in that stack."""
    (name,) = value.values()
    return _export_values(synth, region, part)[name]


def _cross_region(synth: Synth, region: str, part: str, value: Any) -> tuple[str, Any]:
    """A cross-region reference read in `region`'s `part`: (producer stack, its value).

    CDK's reader resolves an SSM parameter `/cdk/exports/<consumer>/<id>` that a writer
    in the producer's stack puts into the consumer's region.
    """
    reader, key = value["Fn::GetAtt"]
    assert synth.raw(region, part)["Resources"][reader]["Type"] == (
        "Custom::CrossRegionExportReader"
    )
    for path in synth.templates:
        template = json.loads(path.read_text())
        for res in template["Resources"].values():
            if res["Type"] == "Custom::CrossRegionExportWriter":
                props = res["Properties"]["WriterProps"]
                if props["region"] == region and key in props["exports"]:
                    return path.name.removesuffix(".template.json"), props["exports"][key]
    raise AssertionError(f"no writer exports {key}")


def _private_route_tables(synth: Synth, region: str) -> set[str]:
    """Route tables of the network stack whose default route leaves through a NAT."""
    resources = synth.raw(region, "network")["Resources"]
    return {
        route["Properties"]["RouteTableId"]["Ref"]
        for route in resources.values()
        if route["Type"] == "AWS::EC2::Route"
        and route["Properties"].get("DestinationCidrBlock") == "0.0.0.0/0"
        and "NatGatewayId" in route["Properties"]
    }


def _pairs(env: EnvironmentSpec) -> list[tuple[str, str]]:
    return list(itertools.combinations(env.aws.regions, 2))


def test_prod_regions_have_disjoint_vpc_cidrs(prod_synth: Synth) -> None:
    cidrs = {}
    for region in prod_synth.env.aws.regions:
        (vpc,) = prod_synth.resources(region, "network", "AWS::EC2::VPC").values()
        cidrs[region] = vpc["Properties"]["CidrBlock"]
        assert cidrs[region] == prod_synth.env.cluster.vpc_cidr_of(region)
        # Route 53 answers a private zone only in VPCs with DNS support and hostnames.
        assert vpc["Properties"]["EnableDnsSupport"] is True
        assert vpc["Properties"]["EnableDnsHostnames"] is True
    assert len(cidrs) == 2
    for a, b in itertools.combinations(cidrs.values(), 2):
        assert not ipaddress.ip_network(a).overlaps(ipaddress.ip_network(b))


def test_one_peering_per_pair_requested_by_the_earlier_region(prod_synth: Synth) -> None:
    env = prod_synth.env
    found = []
    for region in env.aws.regions:
        for conn in prod_synth.resources(region, "peering", PEERING).values():
            props = conn["Properties"]
            found.append((region, props["PeerRegion"]))
            assert props["PeerOwnerId"] == env.aws.account
            assert "PeerRoleArn" not in props  # same account: accepted by CloudFormation
            vpc = _imported(prod_synth, region, "network", props["VpcId"])
            (own_vpc,) = prod_synth.resources(region, "network", "AWS::EC2::VPC")
            assert vpc == {"Ref": own_vpc}
            producer, peer_vpc = _cross_region(prod_synth, region, "peering", props["PeerVpcId"])
            (their_vpc,) = prod_synth.resources(props["PeerRegion"], "network", "AWS::EC2::VPC")
            assert producer == prod_synth.stack_name(props["PeerRegion"], "network")
            assert peer_vpc == {"Ref": their_vpc}
    assert found == _pairs(env)


@pytest.mark.parametrize("region", ["us-east-1", "us-west-2"])
def test_every_private_route_table_routes_the_peer_cidr_through_the_peering(
    prod_synth: Synth, region: str
) -> None:
    env = prod_synth.env
    (peer,) = [r for r in env.aws.regions if r != region]
    routes = prod_synth.resources(region, "peering", "AWS::EC2::Route").values()
    tables = set()
    for route in routes:
        props = route["Properties"]
        assert props["DestinationCidrBlock"] == env.cluster.vpc_cidr_of(peer)
        table = _imported(prod_synth, region, "network", props["RouteTableId"])
        tables.add(table["Ref"])
        connection = props["VpcPeeringConnectionId"]
        if region == env.aws.region:  # the requester: its own connection
            (own,) = prod_synth.resources(region, "peering", PEERING)
            assert connection == {"Ref": own}
        else:  # the accepter: the requester's connection, across regions
            producer, value = _cross_region(prod_synth, region, "peering", connection)
            (theirs,) = prod_synth.resources(peer, "peering", PEERING)
            assert producer == prod_synth.stack_name(peer, "peering")
            assert value == {"Ref": theirs}
    private = _private_route_tables(prod_synth, region)
    assert len(private) == len(env.aws.availability_zones[region])
    assert tables == private  # every private table, and no public one


@pytest.mark.parametrize("region", ["us-east-1", "us-west-2"])
def test_envoy_nlb_admits_the_peer_cidr_on_its_listener_port_only(
    prod_synth: Synth, region: str
) -> None:
    env = prod_synth.env
    (peer,) = [r for r in env.aws.regions if r != region]
    (rule,) = prod_synth.resources(region, "peering", "AWS::EC2::SecurityGroupIngress").values()
    props = rule["Properties"]
    assert props["CidrIp"] == env.cluster.vpc_cidr_of(peer)
    assert (props["IpProtocol"], props["FromPort"], props["ToPort"]) == (
        "tcp",
        ENVOY_LISTENER_PORT,
        ENVOY_LISTENER_PORT,
    )
    # The group is the one on Envoy's NLB, and the port is that NLB's listener.
    group = _imported(prod_synth, region, "ingress", props["GroupId"])
    (nlb,) = prod_synth.resources(
        region, "ingress", "AWS::ElasticLoadBalancingV2::LoadBalancer"
    ).values()
    assert nlb["Properties"]["SecurityGroups"] == [group]
    (listener,) = prod_synth.resources(
        region, "ingress", "AWS::ElasticLoadBalancingV2::Listener"
    ).values()
    assert listener["Properties"]["Port"] == ENVOY_LISTENER_PORT


def test_the_private_zone_is_associated_with_every_regional_vpc(prod_synth: Synth) -> None:
    """`<region>.<domain>` answers are only usable where the zone is associated."""
    env = prod_synth.env
    (zone,) = prod_synth.resources(env.aws.region, "dns", "AWS::Route53::HostedZone").values()
    assert [v["VPCRegion"] for v in zone["Properties"]["VPCs"]] == env.aws.regions


def test_a_single_region_environment_has_no_peering(dev_synth: Synth) -> None:
    assert len(dev_synth.env.aws.regions) == 1
    assert not [p for p in dev_synth.templates if p.name.endswith("-peering.template.json")]


def _prod_data() -> dict[str, Any]:
    return yaml.safe_load(PROD.read_text())


def _load(tmp_path: Path, data: dict[str, Any]) -> EnvironmentSpec:
    path = tmp_path / "environment.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_environment(path)


def test_overlapping_regional_cidrs_are_refused_with_the_field_path(tmp_path: Path) -> None:
    data = _prod_data()
    data["cluster"]["vpc_cidrs"] = {"us-west-2": "10.50.128.0/17"}  # inside us-east-1's
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, data)
    assert "cluster.vpc_cidrs.us-west-2: us-west-2's 10.50.128.0/17 overlaps" in str(caught.value)
    data["cluster"].pop("vpc_cidrs")  # both regions on vpc_cidr
    with pytest.raises(ConfigError, match=r"cluster\.vpc_cidr: us-west-2's 10\.50\.0\.0/16"):
        _load(tmp_path, data)


@pytest.mark.parametrize(
    ("cidrs", "message"),
    [
        ({"eu-west-1": "10.52.0.0/16"}, r"cluster\.vpc_cidrs\.eu-west-1: not one of"),
        ({"us-west-2": "10.51.0.1/16"}, r"us-west-2: '10\.51\.0\.1/16' is not an IPv4 network"),
        ({"us-west-2": "10.48.0.0/12"}, r"us-west-2: .10\.48\.0\.0/12.: a VPC.s CIDR is betw"),
        ({"us-west-2": "fd00::/56"}, r"is not an IPv4 network"),
    ],
)
def test_bad_vpc_cidrs_are_refused(tmp_path: Path, cidrs: dict[str, str], message: str) -> None:
    data = _prod_data()
    data["cluster"]["vpc_cidrs"] = cidrs
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, data)


@pytest.fixture(scope="module")
def three_regions(tmp_path_factory: pytest.TempPathFactory) -> tuple[EnvironmentSpec, Path]:
    """prod spread over a third region, without the global routers: the mesh grows to
    every pair, and with no router to call across regions no Envoy rule is opened."""
    data = load_environment("prod").model_dump(mode="json", exclude_unset=True)
    data["aws"]["secondary_regions"] = ["us-west-2", "eu-west-1"]
    data["aws"]["availability_zones"]["eu-west-1"] = ["eu-west-1a", "eu-west-1b"]
    data["aws"].pop("docker_hub_cache_credentials")
    data["cluster"]["vpc_cidrs"]["eu-west-1"] = "10.52.0.0/16"
    data["global_router"]["enabled"] = False
    env = EnvironmentSpec.model_validate(data)
    outdir = tmp_path_factory.mktemp("cdk-three-regions")
    app = new_app(outdir=str(outdir))
    build(app, env)  # cdk-nag attached: a finding fails synth
    app.synth()
    return env, outdir


def _template(outdir: Path, env: EnvironmentSpec, region: str, part: str) -> dict[str, Any]:
    return json.loads((outdir / f"igw-{env.name}-{region}-{part}.template.json").read_text())


def _of_type(template: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == kind]


def test_three_regions_peer_every_pair_once(three_regions) -> None:
    env, outdir = three_regions
    requested = [
        (region, conn["PeerRegion"])
        for region in env.aws.regions
        for conn in _of_type(_template(outdir, env, region, "peering"), PEERING)
    ]
    assert requested == _pairs(env)
    assert len(requested) == 3
    for region in env.aws.regions:
        peering = _template(outdir, env, region, "peering")
        private = len(env.aws.availability_zones[region])
        routes = _of_type(peering, "AWS::EC2::Route")
        destinations = sorted(r["DestinationCidrBlock"] for r in routes)
        peers = [env.cluster.vpc_cidr_of(r) for r in env.aws.regions if r != region]
        assert destinations == sorted(peers * private)
        assert _of_type(peering, "AWS::EC2::SecurityGroupIngress") == []


def test_three_regions_deploy_in_an_order(three_regions) -> None:
    """Requesters before accepters, each peer's VPC before the request naming it."""
    env, outdir = three_regions
    manifest = json.loads((outdir / "manifest.json").read_text())["artifacts"]
    first, second, third = (f"igw-{env.name}-{r}-peering" for r in env.aws.regions)
    assert {first, f"igw-{env.name}-eu-west-1-network"} <= set(manifest[second]["dependencies"])
    assert {first, second} <= set(manifest[third]["dependencies"])
    assert second not in manifest[first]["dependencies"]
