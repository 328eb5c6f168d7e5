"""Synthesise every environment into gitops/ (run as a script: `python cdk8s/main.py`).

For each `gitops/environments/<env>/environment.yaml`, the charts of `charts.app` render
into `gitops/environments/<env>/rendered/`, and the ArgoCD bootstrap into
`gitops/bootstrap/`. A bad environment prints its field paths (as `igw validate` does),
writes nothing and exits 2, as app.py does.
This file is a script on purpose: `cdk8s/` must never be an importable package named
`cdk8s` (it would shadow the library); the chart code is the `charts` package.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from charts.app import GITOPS_DIR, write_tree
from inference_gateway.cli.messages import config_error_lines
from inference_gateway.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", action="append", help="only this environment (repeatable)")
    parser.add_argument("--gitops-dir", type=Path, default=GITOPS_DIR, help="default: gitops/")
    args = parser.parse_args(argv)
    try:
        changes = write_tree(args.gitops_dir, names=args.env)
    except ConfigError as error:  # the same lines as `igw validate` and app.py, exit 2
        print("\n".join(config_error_lines("cdk8s synth", error)), file=sys.stderr)
        print("cdk8s synth: nothing written", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"cdk8s synth: {error}; nothing written", file=sys.stderr)
        return 2
    for line in changes:
        print(line)
    print(f"cdk8s synth: {len(changes)} file(s) changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
