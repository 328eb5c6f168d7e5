"""An environment whose `gateway:` is the managed add-on's InferenceGatewayConfig renders
what the native form renders, and the settings the managed shape has that this project
lacked are built: per-scheduler route timeouts, the body limit, the JWT's required
claims, picker replicas with leader election, the body-based router's switch and
replicas (envspec/convert.py, docs/managed-gateway.md).

Charts are pure functions of the validated `EnvironmentSpec`, so two environments that
validate to equal specs render the same manifests; the prod case renders both anyway.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from charts.gateway import GatewayChart
from charts.inference import InferenceChart
from charts.picker import PickerChart
from envspec import convert as env_convert
from envspec.environment import ENVIRONMENTS_DIR, EnvironmentSpec, validate_environment
from inference_gateway.cli import convert as cli_convert
from inference_gateway.cli.main import main
from inference_gateway.config.spec import read_yaml
from inference_gateway.errors import ConfigError

Doc = dict[str, Any]
Synth = Callable[..., list[Doc]]
EXAMPLES = Path(__file__).parents[2] / "examples" / "managed"
CERT = "arn:aws:acm:us-east-1:111111111111:certificate/b"
SHIPPED = sorted(p.parent.name for p in ENVIRONMENTS_DIR.glob("*/environment.yaml"))


def raw(name: str) -> Doc:
    data: Doc = yaml.safe_load((ENVIRONMENTS_DIR / name / "environment.yaml").read_text())
    return data


def kinds(docs: list[Doc], kind: str) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.mark.parametrize("name", SHIPPED)
def test_native_to_managed_to_native_is_identical_for_every_shipped_environment(
    name: str,
) -> None:
    native = raw(name)
    managed, notes = env_convert.to_managed(native, name)
    assert managed["gateway"]["apiVersion"] == "inference.sagemaker.aws.amazon.com/v1alpha1"
    assert set(managed) == set(native)
    back, _ = env_convert.to_native(managed, name)
    assert back == native
    # what the managed shape carries itself, without the annotation, is named otherwise
    bare = copy.deepcopy(managed)
    del bare["gateway"]["metadata"]["annotations"]
    unpatched, _ = env_convert.to_native(bare, name)
    from inference_gateway.config import patch

    differing = {patch.field_path(op["path"]) for op in patch.diff(unpatched, native)}
    assert differing == {note.split(":")[0] for note in notes}


def test_the_managed_form_of_prod_renders_what_the_native_form_renders(synth: Synth) -> None:
    native = validate_environment(raw("prod"), "prod")
    managed, _ = env_convert.to_managed(raw("prod"), "prod")
    converted = validate_environment(managed, "prod (managed)")
    assert converted == native
    for chart in (InferenceChart, GatewayChart, PickerChart):
        assert synth(chart, converted) == synth(chart, native)


def example_environment(example: str) -> Doc:
    """examples/managed/environment.yaml with `example` as its gateway and one vLLM
    Deployment per scheduler, labelled as the scheduler selects."""
    env = read_yaml(EXAMPLES / "environment.yaml")
    gateway = read_yaml(EXAMPLES / example)
    template = env["model_servers"][0]
    env["gateway"] = gateway
    env["model_servers"] = [
        {
            **template,
            "pool": s["name"],
            "model": s["modelName"],
            "served_model_name": s["modelName"],
            "pod_labels": s["modelSelector"]["matchLabels"],
        }
        for s in gateway["spec"]["schedulers"]
    ]
    return env


@pytest.mark.parametrize(
    "example", ["gateway-single.yaml", "gateway-bbr.yaml", "gateway-no-prefix.yaml"]
)
def test_each_managed_example_renders(example: str, synth: Synth) -> None:
    env = validate_environment(example_environment(example), example)
    schedulers = read_yaml(EXAMPLES / example)["spec"]["schedulers"]
    inference = synth(InferenceChart, env)
    pools = kinds(inference, "InferencePool")
    assert set(pools) == {s["name"] for s in schedulers}
    for s in schedulers:
        spec = pools[s["name"]]["spec"]
        assert spec["selector"] == s["modelSelector"]
        assert spec["targetPorts"] == [{"number": s["targetPort"]}]
    config = next(d for d in inference if d["kind"] == "InferenceGatewayConfig")
    assert [m["name"] for m in config["spec"]["models"]] == [s["modelName"] for s in schedulers]
    gateway = synth(GatewayChart, env)
    routes = kinds(gateway, "HTTPRoute")
    for s in schedulers:
        (rule,) = routes[f"{s['name']}-route"]["spec"]["rules"]
        assert rule["backendRefs"][0]["name"] == s["name"]
    bbr = read_yaml(EXAMPLES / example)["spec"]["bbr"]["enabled"]
    assert ("igw-bbr" in kinds(gateway, "Deployment")) is bbr
    assert bool(kinds(gateway, "EnvoyExtensionPolicy")) is bbr
    picker = synth(PickerChart, env)
    deployment = kinds(picker, "Deployment")["igw-picker"]
    assert deployment["spec"]["replicas"] == 1  # the examples' `replicas: 1`
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--leader-elect")]
    assert not kinds(picker, "PodDisruptionBudget")  # one replica: a PDB would block drains


def managed_environment(**spec: Any) -> Doc:
    env = example_environment("gateway-bbr.yaml")
    env["gateway"]["spec"].update(spec)
    return env


def test_replicas_above_one_elect_a_leader_through_a_lease(synth: Synth) -> None:
    """As the managed schedulers do above one replica; their replicas all route (the
    workshop's endpoint-picking page: at `replicas: 2` "each replica learns a different
    pod"), so here the holder is the one status writer and every replica stays ready."""
    env = managed_environment()
    for s in env["gateway"]["spec"]["schedulers"]:
        del s["replicas"]  # the managed default: 2
    spec = validate_environment(env, "env")
    assert (spec.kubernetes.picker_replicas, spec.kubernetes.picker_leader_election) == (2, True)
    picker = synth(PickerChart, spec)
    deployment = kinds(picker, "Deployment")["igw-picker"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    at = args.index("--leader-elect-status")
    assert args[at : at + 3] == ["--leader-elect-status", "--lease-name", "igw-picker"]
    rules = kinds(picker, "Role")["igw-picker"]["rules"]
    leases = [r for r in rules if r["apiGroups"] == ["coordination.k8s.io"]]
    # `kubernetes/discovery.py` LeaderElector: read, create, replace (update) its Lease
    assert {verb for r in leases for verb in r["verbs"]} == {"create", "get", "update"}
    # every replica stays ready and routes (the readiness probe asks `readiness`, which
    # the lease does not gate), so a surge rollout and the PodDisruptionBudget still work
    assert kinds(picker, "PodDisruptionBudget")["igw-picker"]["spec"]["minAvailable"] == 1
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_route_timeouts_body_limit_and_required_claims_are_rendered(synth: Synth) -> None:
    env = managed_environment(
        bbr={"enabled": True, "replicas": 3, "maxRequestBodyBytes": 1048576},
        auth={
            "jwt": {
                "provider": {
                    "issuer": "https://login.example.com",
                    "remoteJWKS": {"uri": "https://login.example.com/jwks.json"},
                    "audiences": ["inference"],
                    "requiredClaims": {"team": "ml", "tier": "gold"},
                }
            }
        },
    )
    env["gateway"]["spec"]["schedulers"][0]["routeTimeout"] = "2m"
    spec = validate_environment(env, "env")
    assert spec.kubernetes.auth is not None and spec.kubernetes.auth.api_keys_secret_id is None
    gateway = synth(GatewayChart, spec)
    routes = kinds(gateway, "HTTPRoute")
    assert routes["qwen-route"]["spec"]["rules"][0]["timeouts"] == {"request": "120s"}
    assert routes["qwen-small-route"]["spec"]["rules"][0]["timeouts"] == {"request": "600s"}
    assert kinds(gateway, "Deployment")["igw-bbr"]["spec"]["replicas"] == 3
    policy = kinds(gateway, "SecurityPolicy")["igw-auth"]["spec"]["extAuth"]
    assert policy["bodyToExtAuth"] == {"maxRequestBytes": 1048576}
    auth = kinds(gateway, "Deployment")["igw-auth"]["spec"]["template"]["spec"]
    args = auth["containers"][0]["args"]
    assert "--api-keys" not in args and not kinds(gateway, "ExternalSecret")  # JWT only
    assert args[args.index("--max-body-bytes") + 1] == "1048576"
    claims = [args[i + 1] for i, a in enumerate(args) if a == "--jwt-claim"]
    assert claims == ["team=ml", "tier=gold"]
    picker_args = kinds(synth(PickerChart, spec), "Deployment")["igw-picker"]["spec"]["template"][
        "spec"
    ]["containers"][0]["args"]
    assert picker_args[picker_args.index("--max-body-bytes") + 1] == "1048576"


def test_the_required_claims_reach_igw_auth_as_it_parses_them() -> None:
    """The chart's `--jwt-claim NAME=VALUE` flags, read by `igw auth`'s own parser."""
    from inference_gateway.cli.auth import authenticator
    from inference_gateway.cli.main import build_parser

    argv = ["auth", "--jwt-issuer", "https://i", "--jwt-jwks", "https://i/jwks.json"]
    argv += ["--jwt-audience", "a", "--jwt-claim", "team=ml", "--jwt-claim", "tier=gold"]
    built = authenticator(build_parser("auth").parse_args(argv), "igw auth", jwks_url_allowed=True)
    assert built is not None and built.jwt is not None
    assert built.jwt.required_claims == {"team": "ml", "tier": "gold"}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda env: env["ingress"].update({"certificate_arns": {"us-east-1": CERT}}),
            "gateway.spec.tls.acmArn: also set as ingress.certificate_arns.us-east-1; keep one",
        ),
        (
            lambda env: env["kubernetes"].update({"picker_replicas": 3}),
            "gateway.spec.schedulers[].replicas: also set as kubernetes.picker_replicas",
        ),
        (
            lambda env: env["gateway"]["spec"]["schedulers"][0].update({"routeTimeout": "20m"}),
            "gateway.spec.schedulers[0] (gateway.pools[0].routeTimeoutS): 1200 s is longer than",
        ),
        (
            lambda env: env["gateway"]["spec"]["schedulers"][1]["modelSelector"].update(
                {"matchLabels": {"app": "vllm-qwen"}}
            ),
            "gateway.spec.schedulers[1] (gateway.pools[1].selector): also selects model_servers[0]",
        ),
        (
            lambda env: env["gateway"]["spec"]["schedulers"][0].update({"weights": {"speed": 1}}),
            "gateway.spec.schedulers[0].weights.speed: Extra inputs are not permitted",
        ),
    ],
)  # fmt: skip
def test_a_managed_environment_names_the_field_at_fault(
    change: Callable[[Doc], None], problem: str
) -> None:
    env = managed_environment(tls={"acmArn": "arn:aws:acm:us-east-1:111111111111:certificate/a"})
    env["ingress"], env["kubernetes"] = {}, {}
    change(env)
    with pytest.raises(ConfigError) as caught:
        validate_environment(env, "env")
    assert any(problem in line for line in caught.value.problems), caught.value.problems


def test_the_native_form_refuses_what_the_cluster_cannot_do() -> None:
    env = raw("prod")
    env["kubernetes"]["bbr"] = {"enabled": False}
    with pytest.raises(ConfigError) as caught:
        validate_environment(env, "prod")
    assert any("kubernetes.bbr.enabled" in p for p in caught.value.problems)


def test_igw_convert_converts_an_environment_file_through_the_repositorys_converter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The converter `make venv` registers (pyproject.toml, inference_gateway.converters)."""
    monkeypatch.setattr(cli_convert, "plugin_converters", lambda: [env_convert])
    source = ENVIRONMENTS_DIR / "prod" / "environment.yaml"
    assert main(["convert", str(source)]) == 0
    out, err = capsys.readouterr()
    managed = tmp_path / "environment.yaml"
    managed.write_text(out)
    assert "not carried: gateway.rateLimits" in err
    assert main(["convert", str(managed)]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == raw("prod")
    assert isinstance(validate_environment(yaml.safe_load(out), "x"), EnvironmentSpec)


def test_make_synth_renders_the_managed_prod_as_the_native_tree(
    tmp_path: Path, rendered: dict[str, list[Doc]]
) -> None:
    """The path `make synth` takes (`charts.app.synth_tree` over an environments folder):
    prod written in the managed shape renders the same files as the committed-shape prod
    of the session's fresh tree."""
    from charts.app import synth_tree

    managed, _ = env_convert.to_managed(raw("prod"), "prod")
    folder = tmp_path / "environments" / "prod"
    folder.mkdir(parents=True)
    (folder / "environment.yaml").write_text(yaml.safe_dump(managed, sort_keys=False))
    out = tmp_path / "out"
    synth_tree(out, environments_dir=tmp_path / "environments", names=["prod"])
    files = sorted((out / "environments" / "prod" / "rendered").glob("*.yaml"))
    assert {p.name for p in files} >= {"20-picker.k8s.yaml", "30-gateway.k8s.yaml"}
    for path in files:
        relative = str(path.relative_to(out))
        assert [d for d in yaml.safe_load_all(path.read_text()) if d] == rendered[relative], (
            relative
        )


def test_the_example_environment_loads_and_renders_as_shipped(synth: Synth) -> None:
    from envspec.environment import load_environment

    env = load_environment(EXAMPLES / "environment.yaml")
    assert env.gateway == validate_environment(example_environment("gateway-bbr.yaml")).gateway
    pools = kinds(synth(InferenceChart, env), "InferencePool")
    assert set(pools) == {"qwen", "qwen-small"}
