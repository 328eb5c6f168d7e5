"""The docs' what-if recipe (docs/benchmarks.md), run as written, must print what the docs
show.

The block after the `what-if recipe` marker in docs/benchmarks.md is executed with bash
(the console scripts of this venv first on PATH, `COLUMNS=100` as the docs say) in a
scratch directory that links the repository's `gitops/`, so nothing is written into the
checkout. A doc that drifts from the command (a renamed flag, a changed table, a config
the loader now refuses) fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "benchmarks.md"
MARKER = "<!-- what-if recipe:"


def _recipe() -> tuple[str, str]:
    """(the bash block after the marker, the plain block after it)."""
    text = DOC.read_text()
    assert MARKER in text, "the what-if recipe lost its marker"
    after = text[text.index(MARKER) :]
    blocks = re.findall(r"```(\w*)[^\n]*\n(.*?)```", after, flags=re.S)  # language, markers
    (kind, script), (_, shown) = blocks[0], blocks[1]
    assert kind == "bash"
    return script, shown


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def test_what_if_recipe_prints_what_the_docs_show(tmp_path: Path) -> None:
    script, shown = _recipe()
    (tmp_path / "gitops").symlink_to(REPO / "gitops")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "COLUMNS": "100",
    }
    result = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 1, result.stderr  # the docs say the gate fails
    assert _lines(result.stdout + result.stderr) == _lines(shown)
