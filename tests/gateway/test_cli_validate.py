"""`igw validate FILE…` (issue 37): every shipped config and environment passes, and each
bad-input fixture the other tests already hold is refused, exit 2, with the very problem
lines the command that reads the file prints.

The bad inputs are not copied here: they are read from the tests that own them (their
`pytest.mark.parametrize` lists and module-level cases), so a fixture added there is
checked here too. Environment files are checked by the validator the repository's own
project registers (entry point `inference_gateway.validators`, envspec/validator.py),
present wherever `make venv` installed the repository.
"""

from __future__ import annotations

import copy
import importlib.util
import io
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from inference_gateway.cli.main import main
from inference_gateway.cli.validate import validate_files
from inference_gateway.errors import ConfigError
from inference_gateway.sim.scenario import shipped_scenarios

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "gateway_src" / "inference_gateway" / "sim" / "scenarios"


def _module(relative: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(relative.replace("/", "_"), REPO / relative)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cases(relative: str, test: str) -> list[Any]:
    """The argument tuples of one parametrized test of another module."""
    (mark,) = [m for m in getattr(_module(relative), test).pytestmark if m.name == "parametrize"]
    return list(mark.args[1])


def _validate(*paths: Path, kind: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = validate_files(list(paths), kind, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _problems(err: str) -> list[str]:
    """The problem lines of `igw …: invalid input in SOURCE[: problem]`, whichever command
    printed them and whichever way it named the file."""
    lines = err.strip().splitlines()
    if len(lines) == 1:
        return [lines[0].split(": ", 2)[2].split(".yaml: ", 1)[-1]]
    return [line.strip() for line in lines[1:]]


SHIPPED = [
    *sorted((REPO / "gitops" / "environments").glob("*/environment.yaml")),
    *sorted((REPO / "gitops" / "environments").glob("*/rendered")),
    *sorted((REPO / "gitops" / "environments").glob("*/global/*")),
    *sorted((REPO / "examples").rglob("*.yaml")),
    *sorted(SCENARIOS.rglob("*.yaml")),
]


def test_every_shipped_config_and_environment_is_valid() -> None:
    assert len(SHIPPED) >= 20 and len(list(SCENARIOS.glob("*.yaml"))) == len(shipped_scenarios())
    code, out, err = _validate(*SHIPPED)
    assert (code, err) == (0, "")
    kinds = {
        line.split(": ok (")[0]: line.split(": ok (")[1].split(";")[0] for line in out.splitlines()
    }
    assert kinds[str(REPO / "gitops/environments/prod/environment.yaml")] == "environment"
    assert kinds[str(REPO / "examples/fleet/global.yaml")] == "global"
    assert kinds[str(REPO / "examples/fleet/pods.yaml")] == "fleet"
    assert kinds[str(REPO / "examples/backends.yaml")] == "backends"
    assert kinds[str(SCENARIOS / "lora-mix.yaml")] == "scenario"
    assert kinds[str(REPO / "gitops/environments/prod/rendered")].startswith(
        "manifests: ConfigMap igw-picker-config config.yaml, InferenceGatewayConfig igw"
    )


def test_the_command_line_exits_0_and_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(REPO / "examples" / "fleet" / "pods.yaml")]) == 0
    unknown = tmp_path / "notes.yaml"
    unknown.write_text("title: not a config\n")
    assert main(["validate", str(unknown)]) == 2
    assert "not a file igw knows (give --kind, one of: rewrites," in capsys.readouterr().err


@pytest.mark.parametrize(
    ("data", "problem"),
    _cases(
        "tests/gateway/frontends/global_router/test_config.py", "test_bad_config_names_the_field"
    ),
)
def test_bad_global_router_configs_as_igw_global_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: object, problem: str
) -> None:
    path = tmp_path / "global.yaml"
    path.write_text(yaml.safe_dump(data))
    code, _, err = _validate(path, kind="global")
    problem = problem.removeprefix("<root>: ")  # the one-line form drops the root's path
    assert code == 2 and any(problem in line for line in _problems(err)), err
    assert main(["global", "--config", str(path)]) == 2
    assert _problems(capsys.readouterr().err) == _problems(err)


@pytest.mark.parametrize(
    ("fleet", "expected"),
    _cases(
        "tests/gateway/emulator/test_emulator_fleet.py",
        "test_bad_fleet_file_exits_2_with_the_field_path",
    ),
)
def test_bad_fleet_files_as_igw_emulate_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fleet: dict, expected: str
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    code, _, err = _validate(path, kind="fleet")
    assert code == 2 and expected in err, err
    assert main(["emulate", "--fleet", str(path)]) == 2
    assert _problems(capsys.readouterr().err) == _problems(err)


WEIGHTS = _cases("tests/gateway/config/test_config_weights.py", "test_bad_weights_name_their_field")
EDITS = _module("tests/gateway/config/test_config_reload.py").BAD_EDITS


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        *[(yaml.safe_dump({"pools": [{"name": "p", "selector": {"app": "vllm"}}],
                           "weights": weights}).encode(), phrase)
          for weights, phrase in WEIGHTS],
        *[(data, phrase) for kind, data, phrase in EDITS.values() if kind == "config"],
    ],
)  # fmt: skip
def test_bad_routing_configs_as_igw_serve_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, expected: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("endpoints:\n  - {name: a, address: 127.0.0.1, port: 9}\n")
    code, _, err = _validate(path, kind="config")
    assert code == 2 and expected in err, err
    assert main(["serve", "--endpoints", str(endpoints), "--config", str(path)]) == 2
    assert _problems(capsys.readouterr().err) == _problems(err)


@pytest.mark.parametrize(
    ("doc", "field"),
    _cases(
        "tests/gateway/core/traffic/test_rewrites.py",
        "test_bad_rewrites_are_rejected_with_the_field_path",
    ),
)
def test_bad_rewrites_against_the_config_beside_them(tmp_path: Path, doc: dict, field: str) -> None:
    """Given with a config, rewrites are checked against its models, as `igw serve
    --config C --rewrites R` checks them (the fixtures' known models: chat-v1, chat-v2,
    other)."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "pools": [{"name": "p", "selector": {"app": "vllm"}}],
        "models": [{"name": n, "pool": "p"} for n in ("chat-v1", "chat-v2", "other")],
    }))  # fmt: skip
    rewrites = tmp_path / "rewrites.yaml"
    rewrites.write_text(yaml.safe_dump(doc))
    if doc.get("kind") == "InferenceModelRewrite":  # told apart by its kind, checked last
        code, out, err = _validate(config, rewrites)
        assert f"{config}: ok (config" in out, (out, err)
    else:  # not a rewrite at all: only --kind makes it one
        code, out, err = _validate(rewrites, kind="rewrites")
    assert code == 2, (out, err)
    assert any(line.startswith(field) for line in _problems(err)), err


@pytest.mark.parametrize(
    ("name", "mutation", "phrase"), _module("tests/cdk8s/test_cdk8s_bad_input.py").CASES
)
def test_bad_environments_as_synth_says(
    tmp_path: Path, name: str, mutation: Any, phrase: str
) -> None:
    """app.py and cdk8s/main.py print `load_environment`'s problems through the same lines."""
    from envspec.environment import load_environment

    env = copy.deepcopy(
        yaml.safe_load((REPO / "gitops/environments/dev/environment.yaml").read_text())
    )
    mutation(env)
    path = tmp_path / "environment.yaml"
    path.write_text(yaml.safe_dump(env))
    code, _, err = _validate(path)
    assert code == 2 and phrase in err, err
    with pytest.raises(ConfigError) as raised:
        load_environment(path)
    assert _problems(err) == [p.removeprefix("<root>: ") for p in raised.value.problems]
