"""Write the lock's entries that must be installed after the others: `requirements-last.lock`.

Wheels of the lock own the same files: xds-protos (the Envoy API protos the ext_proc
servers speak) vendors an old copy of opentelemetry-proto's generated modules under
`opentelemetry/proto/`, without `InstrumentationScope`, which the OTLP trace exporter
imports, and a copy of googleapis-common-protos' `google/*` modules. Whichever wheel pip
installs last owns those files, and pip's order among unrelated packages is not a
contract: an image built one way exported traces and one built the other way could not
start `igw auth` (tests/pods found it). So the image and the venv install the lock, then
these entries again with `--force-reinstall --no-deps`; tests/pods/test_shipped_image.py
checks that no other file has two owners.

Run by `make lock` after pip-compile; the entries keep their pins and hashes.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: what is installed last, and why (the reason is written into the file)
LAST = {
    "googleapis-common-protos": "xds-protos vendors a copy of its google/api, google/rpc, "
    "google/logging and google/longrunning modules at the same paths",
    "opentelemetry-proto": "xds-protos vendors an older copy of its modules at the same paths",
}
HEADER = (
    "# Installed after requirements.lock, with --force-reinstall --no-deps: written by\n"
    "# tools/lock_last.py from requirements.lock (`make lock`); never edit by hand.\n"
)


def blocks(lock: str) -> dict[str, str]:
    """Each pinned entry of a pip-compile lock (its pin and hash lines), by name."""
    found: dict[str, str] = {}
    name = ""
    for line in lock.splitlines(keepends=True):
        if line[:1].isalnum():
            name = line.split("==")[0].lower()
            found[name] = line
        elif name and line.lstrip().startswith("--hash"):
            found[name] += line
        else:
            name = ""
    return found


def render(lock: str) -> str:
    entries = blocks(lock)
    missing = sorted(set(LAST) - set(entries))
    if missing:
        raise SystemExit(f"lock_last: not in the lock: {', '.join(missing)}")
    body = "".join(f"# {name}: {why}\n{entries[name]}" for name, why in sorted(LAST.items()))
    return HEADER + body


def main() -> int:
    lock = Path(sys.argv[1])
    target = lock.with_name("requirements-last.lock")
    target.write_text(render(lock.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
