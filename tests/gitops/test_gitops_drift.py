"""The committed `rendered/` and `bootstrap/` are exactly what the sources produce.

On failure: run `make synth` and commit the result (never edit rendered/ by hand).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from charts.app import KUSTOMIZATION, environment_names
from envspec.environment import load_environment


def _generated_dirs(root: Path) -> list[Path]:
    dirs = [Path("bootstrap"), Path("bootstrap/root")]
    for name in environment_names():
        dirs += [Path("environments") / name / "rendered"]
        dirs += [
            Path("environments") / name / "regions" / region
            for region in load_environment(name).aws.regions
        ]
    return dirs


def _files(folder: Path) -> dict[str, Path]:
    return {p.name: p for p in [*folder.glob("*.yaml"), *folder.glob(KUSTOMIZATION)]}


def test_rendered_tree_matches_a_fresh_synth(gitops_dir, fresh_tree):
    problems: list[str] = []
    for folder in _generated_dirs(gitops_dir):
        committed = _files(gitops_dir / folder)
        fresh = _files(fresh_tree / folder)
        for name in sorted(committed.keys() - fresh.keys()):
            problems.append(f"{folder / name}: stale, the sources no longer produce it")
        for name in sorted(fresh.keys() - committed.keys()):
            problems.append(f"{folder / name}: missing, not rendered yet")
        for name in sorted(committed.keys() & fresh.keys()):
            old = committed[name].read_text().splitlines(keepends=True)
            new = fresh[name].read_text().splitlines(keepends=True)
            if old != new:
                diff = difflib.unified_diff(
                    old, new, f"committed/{folder / name}", f"fresh/{folder / name}"
                )
                problems.append("".join(diff))
    assert not problems, "gitops/ is out of date; run `make synth`:\n" + "\n".join(problems)


def test_every_environment_has_a_rendered_tree(gitops_dir):
    for name in environment_names():
        assert sorted((gitops_dir / "environments" / name / "rendered").glob("*.k8s.yaml"))
