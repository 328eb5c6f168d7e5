"""The global router's YAML: unknown keys and malformed cluster lists are clear errors
with field paths, and the CLI turns them into exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from inference_gateway.cli.main import main
from inference_gateway.config.spec import MigrationSpec
from inference_gateway.errors import ConfigError
from inference_gateway.frontends.global_router import parse_router_config

CLUSTER = {"name": "a", "region": "r1", "endpoint": "http://127.0.0.1:1", "hourlyCostUsd": 10}


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"clusters": [{**CLUSTER, "weight": 3}]}, "clusters[0].weight: Extra inputs"),
        ({"clusters": "a,b"}, "clusters: Input should be a valid list"),
        ({"clusters": []}, "clusters: list at least one cluster (or 1 to 10 `gateways`)"),
        ({"clusters": [{"name": "a"}]}, "clusters[0].region: Field required"),
        ({"clusters": [{**CLUSTER, "endpoint": "ftp://x"}]}, "clusters[0].endpoint"),
        ({"clusters": [{**CLUSTER, "hourlyCostUsd": -1}]}, "clusters[0].hourlyCostUsd"),
        ({"clusters": [CLUSTER, CLUSTER]}, "duplicate cluster names: ['a']"),
        ({"clusters": [CLUSTER], "profile": "cheap"}, "profile: Input should be"),
        (
            {"clusters": [CLUSTER], "rateLimits": {"rules": [{"requestsPerMinute": 5}]}},
            "rateLimits need a rateLimitStore or a store",
        ),
        ({"clusters": [CLUSTER], "rateLimitStore": {"url": "http://x"}}, "rateLimitStore.url"),
        (
            {"clusters": [CLUSTER], "rateLimitStore": {"url": "redis://h:6379", "db": 1}},
            "rateLimitStore.db: Extra inputs",
        ),
        ({"clusters": [CLUSTER], "store": {"url": "http://x"}}, "store.url"),
        ([CLUSTER], "<root>: expected a mapping"),
        ({"clusters": [CLUSTER], "migration": {"maxResumes": 11}}, "migration.maxResumes"),
        (
            {"clusters": [CLUSTER], "migration": {"streamIdleTimeoutMs": 5000}},
            "migration.streamIdleTimeoutMs: igw global's stall is streamIdleTimeoutMs",
        ),
    ],
)
def test_bad_config_names_the_field(data: object, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_router_config(data, "global.yaml")
    assert any(problem in line for line in caught.value.problems), caught.value.problems


def test_rate_limits_may_count_in_their_own_store() -> None:
    """`rateLimitStore` alone is enough for `rateLimits` and takes the `StoreSpec` keys;
    without it the limits count in `store`."""
    limits = {"rules": [{"requestsPerMinute": 5}]}
    remote = {
        "url": "rediss://primary:6379",
        "passwordEnv": "IGW_RATELIMIT_STORE_PASSWORD",
        "caFile": "/etc/ssl/ca.pem",
        "timeoutMs": 400,
    }
    spec = parse_router_config(
        {"clusters": [CLUSTER], "rateLimitStore": remote, "rateLimits": limits}
    )
    assert spec.store is None and spec.limits_store is spec.rate_limit_store
    assert spec.rate_limit_store is not None and spec.rate_limit_store.timeout_ms == 400
    regional = {"url": "redis://local:6379"}
    spec = parse_router_config({"clusters": [CLUSTER], "store": regional, "rateLimits": limits})
    assert spec.rate_limit_store is None and spec.limits_store is spec.store


def test_valid_config_keeps_defaults() -> None:
    spec = parse_router_config({"clusters": [CLUSTER], "profiles": {"cost": {"cost": 9}}})
    assert spec.poll_interval_ms == 1000 and spec.profile == "latency"
    assert spec.weights("cost").cost == 9 and spec.weights("latency").proximity == 3
    assert spec.migration == MigrationSpec()  # tier 2 resumes unless told not to
    assert spec.migration.enabled and spec.migration.max_resumes == 2


def test_migration_is_the_gateway_configs_own_model() -> None:
    """Tier 2's `migration` section is tier 1's model (one definition), read from the
    router's file in the file's camelCase."""
    spec = parse_router_config(
        {"clusters": [CLUSTER], "migration": {"enabled": False, "maxResumes": 1, "deadlineMs": 500}}
    )
    assert type(spec.migration) is MigrationSpec
    assert (spec.migration.enabled, spec.migration.max_resumes) == (False, 1)
    assert spec.migration.deadline_ms == 500


@pytest.mark.parametrize(
    "text", ["clusters: [{name: a}]\n", "clusters: {a: 1}\n", "clusters: [\n", "- 1\n"]
)
def test_cli_exits_2_on_a_bad_file(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "global.yaml"
    path.write_text(text)
    assert main(["global", "--config", str(path)]) == 2
    assert "invalid input in" in capsys.readouterr().err


def test_the_documented_example_is_valid() -> None:
    """docs/global-router.md's configuration example parses as written."""
    text = (Path(__file__).parents[4] / "docs" / "global-router.md").read_text()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    spec = parse_router_config(yaml.safe_load(example), "docs/global-router.md")
    assert [c.name for c in spec.clusters] == ["use1-a", "use1-b", "usw2-a"]
    assert spec.store is not None and spec.store.url.startswith("rediss://")
    assert spec.rate_limits.rules[1].tokens_per_minute == 200_000


def test_serve_refuses_a_negative_hourly_cost(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--endpoints", "x.yaml", "--hourly-cost", "-1"]) == 2
    assert "--hourly-cost" in capsys.readouterr().err
