"""Synthesise each shipped environment once per session, exactly as `make synth` does.

jsii is slow to start and an environment takes seconds to synthesise, so every test of
tests/stacks reads the same cloud assembly: `dev_synth` and `prod_synth` build the app
with cdk-nag attached (a failed check raises during synth and is kept for the nag test),
time it, and hand out `Template.from_stack` of each stack (the app is synthesised once;
`from_stack` reads that assembly back).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Before aws_cdk starts node: node 20 is past jsii's end of life and says so on stderr.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

import pytest
from aws_cdk import Stack
from aws_cdk.assertions import Template

from envspec.environment import EnvironmentSpec, load_environment
from stacks.application import RegionStacks, build, new_app


@dataclass
class Synth:
    """One environment's cloud assembly."""

    name: str
    env: EnvironmentSpec
    outdir: Path
    regions: list[RegionStacks]
    seconds: float
    error: Exception | None
    _templates: dict[str, Template] = field(default_factory=dict)

    def stack_name(self, region: str, part: str) -> str:
        return f"igw-{self.name}-{region}-{part}"

    def raw(self, region: str, part: str) -> dict[str, Any]:
        if self.error is not None:
            pytest.fail(f"synth of {self.name} failed: {self.error}")
        path = self.outdir / f"{self.stack_name(region, part)}.template.json"
        return json.loads(path.read_text())

    def stack(self, region: str, part: str) -> Stack:
        (built,) = [r for r in self.regions if r.plan.region == region]
        return getattr(built, part)

    def template(self, region: str, part: str) -> Template:
        """`Template.from_stack` of the already synthesised app (no second synth)."""
        if self.error is not None:
            pytest.fail(f"synth of {self.name} failed: {self.error}")
        key = f"{region}/{part}"
        if key not in self._templates:
            self._templates[key] = Template.from_stack(self.stack(region, part))
        return self._templates[key]

    def resources(self, region: str, part: str, kind: str) -> dict[str, dict[str, Any]]:
        return {
            name: res
            for name, res in self.raw(region, part)["Resources"].items()
            if res["Type"] == kind
        }

    @property
    def templates(self) -> list[Path]:
        return sorted(self.outdir.glob("*.template.json"))

    def manifests(self, region: str, part: str) -> dict[str, list[dict[str, Any]]]:
        """Logical id -> the objects of each KubernetesManifest of the stack (a token in a
        manifest, an ARN from another stack, reads as `TOKEN`)."""
        return {
            name: json.loads(_joined(resource["Properties"]["Manifest"]))
            for name, resource in self.resources(
                region, part, "Custom::AWSCDK-EKS-KubernetesResource"
            ).items()
        }


def _joined(value: Any) -> str:
    """A string with tokens in it is an `Fn::Join`: its parts, each token as `TOKEN`."""
    if isinstance(value, str):
        return value
    sep, parts = value["Fn::Join"]
    return str(sep).join(p if isinstance(p, str) else "TOKEN" for p in parts)


def _synth(name: str, outdir: Path, env: EnvironmentSpec | None = None) -> Synth:
    env = env or load_environment(name)
    started = time.perf_counter()
    app = new_app(outdir=str(outdir))
    regions = build(app, env)
    error: Exception | None = None
    try:
        app.synth()
    except RuntimeError as caught:  # cdk-nag findings surface as ValidationFailed
        error = caught
    return Synth(name, env, outdir, regions, time.perf_counter() - started, error)


@pytest.fixture(scope="session")
def dev_synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return _synth("dev", tmp_path_factory.mktemp("cdk-dev"))


@pytest.fixture(scope="session")
def prod_synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return _synth("prod", tmp_path_factory.mktemp("cdk-prod"))


@pytest.fixture(scope="session", params=["dev", "prod"])
def any_synth(request: pytest.FixtureRequest) -> Synth:
    return request.getfixturevalue(f"{request.param}_synth")
