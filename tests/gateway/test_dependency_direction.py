"""The gateway package never depends on the IaC around it.

`gateway_src/` is the gateway's container build context: its image holds the package
`inference_gateway` and nothing of the platform repository, so a module that imports
`stacks` (the CDK side) or `charts` (the cdk8s side) would ship a command that cannot run
in the image, and would tie the gateway's releases to the IaC's. The IaC imports the
gateway (its config schema), never the other way round. Checked on the source (every
import statement, lazy ones inside functions included), not on what one run imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gateway_src" / "inference_gateway"
IAC_PACKAGES = {"stacks", "charts", "aws_cdk", "cdk8s", "cdk_nag"}


def _imported_top_levels(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif (  # importlib.import_module("stacks…") with a literal name
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value.split(".")[0])
    return names


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_package_has_modules_to_check() -> None:
    assert len(MODULES) > 50


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_gateway_module_imports_the_iac(path: Path) -> None:
    assert _imported_top_levels(path) & IAC_PACKAGES == set()


def test_the_check_sees_lazy_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f():\n    from stacks.cluster import ClusterStack\n"
        "def g():\n    import importlib\n    importlib.import_module('charts.base')\n"
    )
    assert _imported_top_levels(sample) >= {"stacks", "charts"}


CORE = PACKAGE / "core"
#: What the routing core may never import: the front ends and transports that drive it,
#: the shared store behind it, the tools beside it, and any web, RPC or store client
#: (DESIGN §2: the same core runs in the proxy, the ext_proc picker and the simulator's
#: virtual clock).
CORE_FORBIDDEN = {
    "inference_gateway.frontends",
    "inference_gateway.transport",
    "inference_gateway.assembly",
    "inference_gateway.cli",
    "inference_gateway.kubernetes",
    "inference_gateway.emulator",
    "inference_gateway.sim",
    "inference_gateway.demo",
    "inference_gateway.backend_bench",
    # the store implements interfaces the core defines (core/traffic/shared_limits.py)
    "inference_gateway.shared_store",
    "redis",
    "aiohttp",
    "grpc",
    "httptools",
    "uvloop",
}


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


CORE_MODULES = sorted(CORE.rglob("*.py"))


def test_the_core_has_modules_to_check() -> None:
    assert len(CORE_MODULES) > 20


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_core_imports_no_front_end_transport_or_framework(path: Path) -> None:
    bad = {
        name
        for name in _imported_modules(path)
        if any(name == f or name.startswith(f + ".") for f in CORE_FORBIDDEN)
    }
    assert bad == set()


def test_the_core_check_sees_a_front_end_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from inference_gateway.frontends.proxy import Proxy\n")
    assert "inference_gateway.frontends.proxy" in _imported_modules(sample)


ENVSPEC = Path(__file__).resolve().parents[2] / "envspec"


@pytest.mark.parametrize("path", sorted(ENVSPEC.rglob("*.py")), ids=lambda p: p.name)
def test_the_environment_model_imports_neither_side(path: Path) -> None:
    """`envspec` is read by the CDK stacks and the cdk8s charts alike, so it imports
    neither of them nor their libraries: each side depends on it, never on the other."""
    assert _imported_top_levels(path) & IAC_PACKAGES == set()


CHARTS = Path(__file__).resolve().parents[2] / "cdk8s" / "charts"


@pytest.mark.parametrize("path", sorted(CHARTS.rglob("*.py")), ids=lambda p: p.name)
def test_the_charts_do_not_import_the_cdk_stacks(path: Path) -> None:
    assert _imported_top_levels(path) & {"stacks", "aws_cdk"} == set()
