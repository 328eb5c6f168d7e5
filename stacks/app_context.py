"""How the CDK app is asked for an environment, in a module that imports no AWS CDK (the
docs' command checks read it too): the context keys it reads, where each environment's
cloud assembly goes, and what is wrong with a request."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["CONTEXT_KEYS", "DEFAULT_ENVIRONMENT", "OUTPUT_DIR", "context_problems"]

DEFAULT_ENVIRONMENT = "dev"
#: the context keys this app reads (`-c environment=prod`); CDK's own keys all hold a ':'
CONTEXT_KEYS = ("environment",)
#: where every environment's assembly goes, `make synth` and the CDK CLI alike
OUTPUT_DIR = Path(__file__).resolve().parent.parent / "cdk.out"


def context_problems(context: Iterable[str], outdir: str, name: str) -> list[str]:
    """What is wrong with how the app was asked for `name`: a context key it does not
    read (`-c env=prod` would silently build dev), or an assembly folder of the repo's
    cdk.out/ named for another environment (cdk.json's output is dev's)."""
    problems = [
        f"-c {key}=…: not a context key of this app; it reads -c environment=<name>"
        for key in sorted(context)
        if ":" not in key and key not in CONTEXT_KEYS
    ]
    folder = Path(outdir).resolve()
    if folder.parent == OUTPUT_DIR and folder.name != name:
        problems.append(
            f"-o {folder.relative_to(OUTPUT_DIR.parent)}: {name}'s assembly goes to "
            f"cdk.out/{name}: add -o cdk.out/{name}"
        )
    return problems
