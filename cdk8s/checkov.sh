#!/usr/bin/env bash
# checkov from its own virtual environment, created on first use from the exact pins in
# checkov-requirements.txt (checkov's pins conflict with the project's .venv). Offline:
# --skip-download keeps checkov from calling its vendor's API for guideline links.
#   cdk8s/checkov.sh -d gitops --framework kubernetes
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${IGW_CHECKOV_VENV:-$here/.tools-venv}"
reqs="$here/checkov-requirements.txt"
stamp="$venv/.installed-$(sha256sum "$reqs" | cut -c1-16)"
if [[ ! -f $stamp ]]; then
  echo "==> installing checkov into $venv (first run takes a minute)" >&2
  "${PYTHON:-python3}" -m venv "$venv"
  # The file is a complete freeze, so no resolution is needed (and none can drift).
  "$venv/bin/pip" install --disable-pip-version-check -q --no-deps -r "$reqs" 2>&1 \
    | { grep -v '^WARNING: Location' || true; } >&2
  touch "$stamp"
fi
exec "$venv/bin/checkov" --skip-download "$@"
