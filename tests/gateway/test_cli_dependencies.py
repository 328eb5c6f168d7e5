"""`igw` in an environment that lacks a command's dependencies: say what to install, exit 1.

A partial venv (`make demo` installs only the gateway's part) or a slim image must not
answer "invalid input" (exit 2) for input that is fine. The packages are hidden with a
`sitecustomize` import blocker in a child process, so the real import machinery runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from inference_gateway.cli import main as cli

LOCK = "gateway_src/requirements.lock"
BLOCKER = """\
import sys
class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _Hide())
"""


def _igw_without(tmp_path: Path, hidden: set[str], *argv: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(hidden=hidden))
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "inference_gateway.cli.main", *argv],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("hidden", "argv", "requirements"),
    [
        ({"aiohttp"}, ["emulate", "--gpu", "H100", "--model", "llama-3.1-8b"], LOCK),
        ({"orjson"}, ["simulate", "--list"], LOCK),
        ({"rich"}, ["bench", "backends", "examples/backends.yaml"], LOCK),
        # Kubernetes mode imports its client late, inside the command
        (
            {"kubernetes_asyncio"},
            ["picker", "--grpc-port", "0", "--metrics-port", "0"],
            LOCK,
        ),
    ],
)
def test_a_missing_package_says_what_to_install_and_exits_1(
    tmp_path: Path, hidden: set[str], argv: list[str], requirements: str
) -> None:
    result = _igw_without(tmp_path, hidden, *argv)
    assert result.returncode == 1, result.stderr
    (name,) = hidden
    assert f"igw {argv[0]}: needs the Python package {name!r}" in result.stderr
    assert f"pip install -r {requirements}" in result.stderr
    assert "invalid input" not in result.stderr and "Traceback" not in result.stderr


def test_help_lists_an_unavailable_command_instead_of_crashing(tmp_path: Path) -> None:
    result = _igw_without(tmp_path, {"aiohttp"}, "--help")
    assert result.returncode == 0, result.stderr
    assert "unavailable here: needs the package 'aiohttp'" in result.stdout


def test_a_lazy_import_inside_a_command_is_reported_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def handler(args: object) -> int:
        import not_an_installed_package  # noqa: F401

        return 0

    module = types.ModuleType("igw_test_command")
    module.register = lambda sub: sub.add_parser("lazy").set_defaults(handler=handler)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "igw_test_command", module)
    monkeypatch.setitem(cli.SUBCOMMANDS, "lazy", "igw_test_command")
    assert cli.main(["lazy"]) == 1
    assert "needs the Python package 'not_an_installed_package'" in capsys.readouterr().err


def test_a_missing_module_of_our_own_is_a_bug_not_a_dependency() -> None:
    error = ModuleNotFoundError("No module named 'inference_gateway.gone'")
    error.name = "inference_gateway.gone"
    assert cli.missing_dependency(error) is None
