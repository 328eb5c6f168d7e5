"""Every file this repository's docstrings and docs name exists.

A docstring or doc that points at a file that was moved or removed sends a newcomer to
a room that is not there. Read: every docstring (module, class, function) of the Python
under `gateway_src/`, `stacks/`, `cdk8s/`, `bench/`, `tools/` and `envspec/`, and the
text of `README.md`, `gateway_src/README.md` and `docs/*.md`.

What counts as a path here, strictly and without a list of exceptions:

* a token with a slash and a file extension (`core/request/attempts.py`,
  `docs/picker.md`, `../gateway_src/README.md`) whose first directory is one of ours as
  seen from where it is named: it is looked up from the repository's root, the
  package, `cdk8s/`, `stacks/`, `tests/` and every folder above the file that names
  it, so both `frontends/status.py` and, inside `frontends/`, `extproc/picker.py`
  resolve. A path whose first directory is not there (`vllm/envs.py`), or whose second
  directory is not (`docs/router/kv_cache_routing.md`, `tests/v1/...`), is another
  project's; another project's file directly under a directory name of ours is cited
  by its URL. A path led by `../` is relative to the file that names it.
* a dotted name from `inference_gateway.` on: the longest prefix that is a module must
  exist, and the rest must be attributes of it; or it is an entry point group the
  project declares (pyproject.toml).

A bare file name (`picker.py`) is not checked: vLLM's and Envoy's files share names
with ours, and only a path says whose it is. Another project's file is named with its
project, or by its URL (whose slashes never start a path here).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gateway_src" / "inference_gateway"
PYTHON_ROOTS = ("gateway_src", "stacks", "cdk8s", "bench", "tools", "envspec")
EXTENSIONS = "py|pyi|yaml|yml|md|json|toml|lua|txt|sh|proto|j2|jinja|cfg|ini"
PATH = re.compile(rf"(?<![\w./:-])((?:\.\./)*(?:[\w-]+/)+[\w.-]+\.(?:{EXTENSIONS}))(?![\w/-])")
DOTTED = re.compile(r"(?<![\w.])(inference_gateway(?:\.\w+)+)")
BASES = [ROOT, ROOT / "gateway_src", PACKAGE, ROOT / "cdk8s", ROOT / "stacks", ROOT / "tests"]


def _tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    return [ROOT / name for name in out.decode().split("\0") if name]


TRACKED = _tracked()
#: The entry point groups the project declares: dotted names that are no module.
GROUP = re.compile(r'^\[project\.entry-points\."([\w.]+)"\]', re.M)
ENTRY_POINT_GROUPS = set(GROUP.findall((ROOT / "pyproject.toml").read_text()))


def _docstrings(path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node, clean=False)
            if text:
                yield text


def _texts() -> Iterator[tuple[Path, str]]:
    for path in TRACKED:
        rel = path.relative_to(ROOT)
        if path.suffix == ".py" and rel.parts[0] in PYTHON_ROOTS and path.exists():
            for text in _docstrings(path):
                yield path, text
        elif rel.suffix == ".md" and (
            (rel.parts[0] == "docs" and len(rel.parts) == 2)
            or str(rel) in {"README.md", "gateway_src/README.md"}
        ):
            yield path, path.read_text()


def _path_holds(source: Path, token: str) -> bool:
    if token.startswith("../"):
        return (source.parent / token).exists()
    first, *rest = token.split("/")
    bases = BASES + [p for p in source.parents if p.is_relative_to(ROOT)]
    homes = [base / first for base in bases if (base / first).is_dir()]
    if len(rest) > 1:  # a second directory: it must be ours too, or the path is not
        homes = [home for home in homes if (home / rest[0]).is_dir()]
    if not homes:
        return True  # another project's (`vllm/envs.py`, `pkg/epp/...`)
    return any((home / "/".join(rest)).exists() for home in homes)


def _dotted_holds(name: str) -> bool:
    if name in ENTRY_POINT_GROUPS:
        return True
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            value: object = importlib.import_module(module)
            for attr in parts[end:]:
                if not hasattr(value, attr):
                    return False
                value = getattr(value, attr)
            return True
    return False


def _broken() -> list[str]:
    out = []
    for source, text in _texts():
        where = source.relative_to(ROOT)
        out += [f"{where}: {m}" for m in PATH.findall(text) if not _path_holds(source, m)]
        out += [f"{where}: {m}" for m in DOTTED.findall(text) if not _dotted_holds(m)]
    return sorted(set(out))


def test_every_named_path_exists() -> None:
    assert _broken() == []


def test_the_reader_sees_paths_and_names() -> None:
    seen = [m for _, text in _texts() for m in PATH.findall(text) + DOTTED.findall(text)]
    assert "core/request/attempts.py" in seen
    assert len(seen) > 300


@pytest.mark.parametrize(
    ("token", "holds"),
    [
        ("core/request/attempts.py", True),
        ("core/request/upstream.py", False),
        ("docs/picker.md", True),
        ("docs/latency-profiles-gone.md", False),
        ("extproc/picker.py", True),  # from inside frontends/
        ("vllm/v1/core/kv_cache_utils.py", True),  # vLLM's
        ("docs/router/kv_cache_routing.md", True),  # another project's docs/
        ("../gateway_src/README.md", True),
        ("../gateway_src/NOPE.md", False),
    ],
)
def test_a_path_is_looked_up_where_it_is_named(token: str, holds: bool) -> None:
    source = PACKAGE / "frontends" / "extproc" / "stream.py"
    if token.startswith("../"):
        source = ROOT / "docs" / "picker.md"
    assert _path_holds(source, token) is holds


@pytest.mark.parametrize(
    ("name", "holds"),
    [
        ("inference_gateway.core.request.attempts", True),
        ("inference_gateway.core.request.attempts.AttemptPlan", True),
        ("inference_gateway.store.client", False),
        ("inference_gateway.core.request.attempts.NoSuchThing", False),
    ],
)
def test_a_dotted_name_is_imported(name: str, holds: bool) -> None:
    assert _dotted_holds(name) is holds
