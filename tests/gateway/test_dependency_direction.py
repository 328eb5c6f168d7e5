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


#: Rooms that must not import another room, each with why (issue 36, "Arrows that point
#: down"). A room is a subpackage of `inference_gateway`; a rule holds for every import of
#: every module in it, lazy ones included.
ARROWS: dict[str, tuple[set[str], str]] = {
    "protocols": (
        {"inference_gateway"},  # all of it but itself (see `_breaks`)
        "a peer's wire format is shared by the router and the emulator, so it depends on "
        "neither, or a mistake in one side's code would be the other's expectation",
    ),
    "config": (
        {
            "inference_gateway.core",
            "inference_gateway.assembly",
            "inference_gateway.frontends",
            "inference_gateway.shared_store",
        },
        "the config is the schema the core reads; what needs the plugins is checked by "
        "the core (`core/scheduling/config_checks.py`), so the two rooms form no loop; "
        "a front end's or the store's schema lives here too (`config/global_router.py`, "
        "`config/store.py`), so reading a config file needs no driver and no store client",
    ),
    "emulator": (
        {"inference_gateway.core"},
        "the emulated vLLM speaks vLLM's formats (`protocols`), never the router's own "
        "code: the two are tested against each other",
    ),
    "transport": (
        {"inference_gateway.core"},
        "a transport moves bytes and hands what it decoded to whoever subscribes; the "
        "wiring to the core is the assembly's (`assembly/kv_events.py`)",
    ),
    "frontends": (
        {"inference_gateway.sim"},
        "a driver of the core does not reach into another driver's room; a rule two "
        "drivers share lives in the core",
    ),
    "sim": (
        {"inference_gateway.frontends"},
        "the simulator runs the core's rules (the tier-2 choice and cluster registry are "
        "`core/scheduling/cluster_choice.py` and `cluster_registry.py`), not a front end's",
    ),
}


def _breaks(room: str, path: Path) -> set[str]:
    forbidden, _ = ARROWS[room]
    own = f"inference_gateway.{room}"
    return {
        name
        for name in _imported_modules(path)
        if not (name == own or name.startswith(own + "."))
        and any(name == f or name.startswith(f + ".") for f in forbidden)
    }


ARROW_MODULES = [
    (room, path) for room in sorted(ARROWS) for path in sorted((PACKAGE / room).rglob("*.py"))
]


def test_every_room_with_a_rule_has_modules() -> None:
    assert {room for room, _ in ARROW_MODULES} == set(ARROWS)


@pytest.mark.parametrize(
    ("room", "path"),
    ARROW_MODULES,
    ids=lambda v: str(v.relative_to(PACKAGE)) if isinstance(v, Path) else v,
)
def test_imports_point_down(room: str, path: Path) -> None:
    assert _breaks(room, path) == set(), ARROWS[room][1]


@pytest.mark.parametrize(
    ("room", "source", "bad"),
    [
        ("emulator", "from inference_gateway.core.scheduling import kv_index", True),
        ("emulator", "from inference_gateway.protocols.vllm import kv_events", False),
        ("transport", "import inference_gateway.core.scheduling.kv_index", True),
        ("config", "from inference_gateway.core.scheduling.registry import kind_of", True),
        ("config", "from inference_gateway.config.checks import duplicates", False),
        ("protocols", "def f():\n    from inference_gateway.errors import ConfigError", True),
        ("protocols", "from inference_gateway.protocols.vllm import block_hashing", False),
        ("sim", "from inference_gateway.frontends.global_router.server import x", True),
        ("sim", "from inference_gateway.frontends import proxy", True),
        ("sim", "import inference_gateway.frontends.global_router.clusters", True),
        ("sim", "from inference_gateway.core.scheduling import cluster_registry", False),
        ("config", "from inference_gateway.config.store import StoreSpec", False),
        ("config", "from inference_gateway.shared_store.client import StoreSpec", True),
        ("frontends", "import inference_gateway.sim.fleet.tier", True),
    ],
)
def test_the_arrow_check_sees_a_wrong_import(
    tmp_path: Path, room: str, source: str, bad: bool
) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(source + "\n")
    assert bool(_breaks(room, sample)) is bad
