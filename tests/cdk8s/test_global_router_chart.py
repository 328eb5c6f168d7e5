"""The global router's per-region manifests (cdk8s/charts/global_router.py).

Built-in kinds and the External Secrets resources of these folders are also checked by
tests/cdk8s/test_cdk8s_validation.py (kubernetes-validate strict, the CRD subsets under
cdk8s/crds/external/) and by checkov (tests/gitops), which read every rendered file.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_app import chart_app

import cdk8s
from charts.app import GITOPS_DIR
from charts.global_router import (
    CONFIG_KEY,
    GLOBAL_ROUTER,
    PASSWORD_ENV,
    RATE_LIMIT_PASSWORD_ENV,
    RATE_LIMIT_URL_PLACEHOLDER,
    STORE_SECRET,
    URL_PLACEHOLDER,
    GlobalRouterChart,
    router_config,
    synth_global_routers,
)
from charts.picker import PickerChart
from envspec.argocd_manifests import PATCHED_KUSTOMIZATION
from envspec.environment import EnvironmentSpec, load_environment
from envspec.global_router import (
    STORE_AUTH_KEY,
    STORE_URL_KEY,
    global_folder,
    rate_limit_store_secret_name,
    store_secret_names,
)
from stacks.parts.pod_identity import workloads

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def prod() -> EnvironmentSpec:
    return load_environment("prod")


def _synth(env: EnvironmentSpec, region: str) -> dict[str, Doc]:
    chart = GlobalRouterChart(chart_app(), "test", env=env, region=region)
    return {d["kind"]: d for d in cdk8s.Testing.synth(chart)}


@pytest.fixture(scope="module")
def west(prod: EnvironmentSpec) -> dict[str, Doc]:
    return _synth(prod, "us-west-2")


PRIMARY_STORE = "rediss://primary:6380/0"


def _filled_config(docs: dict[str, Doc], url: str) -> dict[str, Any]:
    """What External Secrets writes: the ConfigMap's template with the region's store URL
    and the primary's (the rate-limit store) in it."""
    template = docs["ConfigMap"]["data"][CONFIG_KEY]
    assert template.count(URL_PLACEHOLDER) == 1
    assert template.count(RATE_LIMIT_URL_PLACEHOLDER) == 1
    filled = template.replace(URL_PLACEHOLDER, url)
    return yaml.safe_load(filled.replace(RATE_LIMIT_URL_PLACEHOLDER, PRIMARY_STORE))


def test_config_lists_every_region_and_is_home_in_its_own(prod, west):
    config = _filled_config(west, "rediss://master.x.usw2.cache.amazonaws.com:6380/0")
    assert config["homeRegion"] == "us-west-2"
    assert [(c["region"], c["endpoint"]) for c in config["clusters"]] == [
        ("us-east-1", "https://us-east-1.inference.internal.example.com"),
        ("us-west-2", "https://us-west-2.inference.internal.example.com"),
    ]
    # H100 pool 8 x 6.88 + A10G pool 4 x 1.212 + the P/D pool's prefill and decode pods
    # 2 x 6.88 (prod's model servers at their minimum and the pools' prices).
    assert [c["hourlyCostUsd"] for c in config["clusters"]] == [pytest.approx(66.768)] * 2
    assert config["store"] == {
        "url": "rediss://master.x.usw2.cache.amazonaws.com:6380/0",
        "passwordEnv": PASSWORD_ENV,
    }
    assert config["rampS"] == prod.global_router.ramp_s


def test_config_is_one_the_router_accepts(prod, west):
    """The rendered file parsed by `igw global`'s own loader: unknown keys there are
    errors, so a key the router does not know (such as `rateLimitStore` before it
    existed) fails here."""
    from inference_gateway.config import global_router as router

    spec = router.parse_router_config(
        _filled_config(west, "rediss://master.x.usw2.cache.amazonaws.com:6380/0")
    )
    assert spec.home_region == "us-west-2"
    assert spec.store.password_env == PASSWORD_ENV
    assert spec.rate_limit_store is not None and spec.rate_limit_store.url == PRIMARY_STORE
    assert [c.name for c in spec.clusters] == ["prod-us-east-1", "prod-us-west-2"]


def test_store_secret_reads_the_regions_own_secrets_manager(prod, west):
    store, secret = west["SecretStore"], west["ExternalSecret"]
    assert store["spec"]["provider"]["aws"] == {"service": "SecretsManager", "region": "us-west-2"}
    assert secret["spec"]["secretStoreRef"] == {"kind": "SecretStore", "name": STORE_SECRET}
    auth, endpoint = store_secret_names(prod.name)
    assert {
        (d["secretKey"], d["remoteRef"]["key"], d["remoteRef"]["property"])
        for d in secret["spec"]["data"]
    } == {
        (STORE_AUTH_KEY, auth, STORE_AUTH_KEY),
        (STORE_URL_KEY, endpoint, STORE_URL_KEY),
        # the primary's store, for the rate limits (its replicated secret)
        ("rateLimitPassword", rate_limit_store_secret_name(prod.name), STORE_AUTH_KEY),
        ("rateLimitUrl", rate_limit_store_secret_name(prod.name), STORE_URL_KEY),
    }
    template = secret["spec"]["target"]["template"]
    assert template["templateFrom"][0]["configMap"]["name"] == west["ConfigMap"]["metadata"]["name"]
    assert template["templateFrom"][0]["configMap"]["items"] == [
        {"key": CONFIG_KEY, "templateAs": "Values"}
    ]
    assert secret["spec"]["target"]["name"] == STORE_SECRET


def test_deployment_is_hardened_probed_and_wired(prod, west):
    deployment = west["Deployment"]
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["livenessProbe"]["httpGet"]["path"] == "/metrics"
    args = container["args"]
    assert args[0] == "global"
    assert args[args.index("--host") + 1] == "0.0.0.0"
    assert args[args.index("--port") + 1] == str(prod.global_router.port)
    assert args[args.index("--environment") + 1] == "prod"
    assert args[args.index("--config") + 1] == f"/etc/igw-global/{CONFIG_KEY}"
    secrets = [e for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})]
    assert secrets == [
        {
            "name": PASSWORD_ENV,
            "valueFrom": {"secretKeyRef": {"name": STORE_SECRET, "key": STORE_AUTH_KEY}},
        },
        {
            "name": RATE_LIMIT_PASSWORD_ENV,
            "valueFrom": {"secretKeyRef": {"name": STORE_SECRET, "key": "rateLimitPassword"}},
        },
    ]
    config_volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert config_volume["secret"]["secretName"] == STORE_SECRET
    assert pod["serviceAccountName"] == GLOBAL_ROUTER
    assert workloads(prod.kubernetes.namespace)["global_router"].service_account == GLOBAL_ROUTER


def test_config_change_rolls_the_pods(prod):
    before = _synth(prod, "us-east-1")["Deployment"]
    slower = prod.model_copy(
        update={"global_router": prod.global_router.model_copy(update={"ramp_s": 90.0})}
    )
    after = _synth(slower, "us-east-1")["Deployment"]
    key = "igw.dev/config-sha256"
    old = before["spec"]["template"]["metadata"]["annotations"][key]
    assert after["spec"]["template"]["metadata"]["annotations"][key] != old


def test_service_binding_pdb_and_policy_select_the_router(prod, west):
    pods = west["Deployment"]["spec"]["template"]["metadata"]["labels"]
    selector = west["Service"]["spec"]["selector"]
    assert selector.items() <= pods.items()
    assert west["PodDisruptionBudget"]["spec"] == {
        "minAvailable": 1,
        "selector": {"matchLabels": selector},
    }
    binding = west["TargetGroupBinding"]["spec"]
    # the target group by ARN, patched in by the region's Application (never a name)
    assert "targetGroupName" not in binding and "targetGroupARN" not in binding
    assert binding["serviceRef"] == {"name": GLOBAL_ROUTER, "port": prod.global_router.port}
    policy = west["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"] == selector
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": prod.global_router.port}]
    cidrs = {s["ipBlock"]["cidr"] for s in rule["from"] if "ipBlock" in s}
    assert cidrs == {*prod.ingress.allowed_cidrs, prod.cluster.vpc_cidr_of("us-west-2")}


def test_one_folder_per_region_only_where_enabled(tmp_path):
    prod, dev = load_environment("prod"), load_environment("dev")
    assert not dev.global_router.enabled
    assert synth_global_routers(dev, tmp_path) == []
    folders = synth_global_routers(prod, tmp_path)
    assert folders == [tmp_path / global_folder("prod", r) for r in prod.aws.regions]
    for folder in folders:
        assert sorted(p.name for p in folder.glob("*.yaml")) == [
            "70-global-router.k8s.yaml",
            PATCHED_KUSTOMIZATION,
        ]
        kustomization = yaml.safe_load((folder / PATCHED_KUSTOMIZATION).read_text())
        assert kustomization["resources"] == ["70-global-router.k8s.yaml"]


def test_a_region_outside_the_environment_is_refused(prod):
    with pytest.raises(ValueError, match="eu-west-1 is not a region"):
        GlobalRouterChart(chart_app(), "x", env=prod, region="eu-west-1")


def test_router_config_function_matches_the_rendered_template(prod, west):
    assert _filled_config(west, "rediss://h:1/0") == router_config(
        prod, "us-west-2", store_url="rediss://h:1/0", rate_limit_store_url=PRIMARY_STORE
    )


def test_committed_region_folders_match_a_fresh_synth(rendered_root: Path):
    """gitops/environments/<env>/global/<region>/ is drift-free (`python cdk8s/main.py`)."""
    fresh = sorted(rendered_root.glob("environments/*/global/*/*.yaml"))
    committed = sorted(GITOPS_DIR.glob("environments/*/global/*/*.yaml"))
    assert [p.relative_to(rendered_root) for p in fresh] == [
        p.relative_to(GITOPS_DIR) for p in committed
    ]
    assert fresh, "prod has a global tier, so something must render"
    for new, old in zip(fresh, committed, strict=True):
        diff = list(
            difflib.unified_diff(old.read_text().splitlines(), new.read_text().splitlines())
        )
        assert not diff, "\n".join(diff)


def _picker_env(env: EnvironmentSpec) -> dict[str, Doc]:
    docs = cdk8s.Testing.synth(PickerChart(chart_app(), "picker", env=env))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    container, *_sidecars = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e for e in container["env"]}


def test_pickers_share_the_regions_store_through_the_routers_secret(prod, west):
    """With the global tier on, the picker (same manifests in every region) reads
    `igw picker --store`'s $IGW_STORE_URL and $IGW_STORE_PASSWORD from the Secret this
    region's router folder renders from this region's Secrets Manager; optional, so a
    picker that starts before External Secrets has synced still runs (alone)."""
    env = _picker_env(prod)
    for name, key in (("IGW_STORE_URL", STORE_URL_KEY), ("IGW_STORE_PASSWORD", STORE_AUTH_KEY)):
        assert env[name]["valueFrom"] == {
            "secretKeyRef": {"name": STORE_SECRET, "key": key, "optional": True}
        }
    secret = west["ExternalSecret"]
    assert secret["spec"]["target"]["name"] == STORE_SECRET
    assert west["ExternalSecret"]["metadata"]["namespace"] == prod.kubernetes.namespace
    data = secret["spec"]["target"]["template"]["data"]
    assert data[STORE_URL_KEY] == URL_PLACEHOLDER
    assert data[STORE_AUTH_KEY] == "{{ ." + STORE_AUTH_KEY + " }}"


def test_pickers_have_no_store_without_the_global_tier():
    dev = load_environment("dev")
    assert not dev.global_router.enabled
    assert not {"IGW_STORE_URL", "IGW_STORE_PASSWORD"} & set(_picker_env(dev))


@pytest.mark.parametrize("region", ["us-east-1", "us-west-2"])
def test_every_region_counts_rate_limits_in_the_primarys_store(prod, region):
    """Each region's router names the primary's store as `rateLimitStore`, read from the
    secret the primary replicates to every region (same name everywhere, so the region's
    own SecretStore reads its local copy), with the token in its own variable."""
    docs = _synth(prod, region)
    template = docs["ConfigMap"]["data"][CONFIG_KEY]
    assert template.count(RATE_LIMIT_URL_PLACEHOLDER) == 1
    config = yaml.safe_load(
        template.replace(URL_PLACEHOLDER, "rediss://local:6380/0").replace(
            RATE_LIMIT_URL_PLACEHOLDER, "rediss://primary:6380/0"
        )
    )
    assert config["rateLimitStore"] == {
        "url": "rediss://primary:6380/0",
        "passwordEnv": RATE_LIMIT_PASSWORD_ENV,
    }
    assert config["store"]["url"] == "rediss://local:6380/0"
    assert config == router_config(
        prod,
        region,
        store_url="rediss://local:6380/0",
        rate_limit_store_url="rediss://primary:6380/0",
    )
    secret = docs["ExternalSecret"]["spec"]
    assert docs["SecretStore"]["spec"]["provider"]["aws"]["region"] == region
    shared = rate_limit_store_secret_name(prod.name)
    reads = {
        d["secretKey"]: (d["remoteRef"]["key"], d["remoteRef"]["property"]) for d in secret["data"]
    }
    url_key = RATE_LIMIT_URL_PLACEHOLDER.strip("{} .")
    assert reads[url_key] == (shared, STORE_URL_KEY)
    password_keys = [k for k, v in reads.items() if v == (shared, STORE_AUTH_KEY)]
    assert len(password_keys) == 1
    (container,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in container["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert env[RATE_LIMIT_PASSWORD_ENV] == {"name": STORE_SECRET, "key": password_keys[0]}
    assert env[PASSWORD_ENV] == {"name": STORE_SECRET, "key": STORE_AUTH_KEY}
    assert password_keys[0] in secret["target"]["template"]["data"]
