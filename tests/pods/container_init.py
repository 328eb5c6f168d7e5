"""The container's first process: builds its root filesystem, then becomes the container.

Run as root inside the pod's network namespace and a mount namespace of its own
(`kubelet.Container.start` puts it there with nsenter and unshare), with one argument: a
JSON file that says what to build (`kubelet.RootSpec`). In order, as a container runtime
does it:

1. a tmpfs becomes the new root; the host's /usr is bound read-only (the distribution
   both images are built on: Debian, as python:3.11-slim), /bin, /sbin, /lib and /lib64
   are the merged-/usr symlinks, /etc is a copy of the host's (no passwd entry for the
   pod's uid: the host has none), /proc, /sys, a minimal /dev with a 64 MiB /dev/shm, and
   /tmp, /var/tmp world-writable as in the image;
2. the image's layers: its /usr/local (and the base interpreter it links to) bound
   read-only at their paths;
3. the volumes at their mountPaths (binds of the pod's emptyDir folders, read-only binds
   of the rendered ConfigMap and Secret files), /etc/hosts and /etc/hostname written as
   the kubelet does, and the test CAs that stand in for publicly trusted ones appended to
   the CA bundle;
4. with `readOnlyRootFilesystem`, the root remounted read-only, so only volumes are
   writable;
5. chroot, the working directory, supplementary groups (fsGroup), gid, uid, and
   no_new_privs (`allowPrivilegeEscalation: false`), then exec of the command with
   exactly the resolved environment (no HOME unless the spec or image sets one).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

PR_SET_NO_NEW_PRIVS = 38
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def mount(*argv: str) -> None:
    subprocess.run(["mount", *argv], check=True)


def inside(root: Path, path: str) -> Path:
    """PATH under ROOT, following symlinks as the container would see them."""
    current = root
    for part in Path(path).parts[1:]:
        candidate = current / part
        if candidate.is_symlink():
            link = os.readlink(candidate)
            candidate = inside(root, link) if link.startswith("/") else current / link
        current = candidate
    return current


def base_layout(root: Path) -> None:
    mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(root))
    (root / "usr").mkdir()
    mount("--bind", "/usr", str(root / "usr"))
    mount("-o", "remount,bind,ro", str(root / "usr"))
    for name in ("bin", "sbin", "lib", "lib64"):
        host = Path("/") / name
        if host.is_symlink():
            (root / name).symlink_to(os.readlink(host))
    shutil.copytree("/etc", root / "etc", symlinks=True, ignore_dangling_symlinks=True)
    for name in ("proc", "sys", "dev", "tmp", "run", "var", "home", "root"):
        (root / name).mkdir(mode=0o755)
    mount("-t", "proc", "proc", str(root / "proc"))
    mount("--rbind", "-o", "ro", "/sys", str(root / "sys"))
    mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(root / "dev"))
    for device in DEVICES:
        (root / "dev" / device).touch()
        mount("--bind", f"/dev/{device}", str(root / "dev" / device))
    (root / "dev" / "shm").mkdir()
    mount("-t", "tmpfs", "-o", "mode=1777,size=64m", "tmpfs", str(root / "dev" / "shm"))
    (root / "dev" / "fd").symlink_to("/proc/self/fd")
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        (root / "dev" / name).symlink_to(f"/proc/self/fd/{number}")
    (root / "var" / "tmp").mkdir()
    (root / "var" / "run").symlink_to("/run")
    for world in (root / "tmp", root / "var" / "tmp"):
        world.chmod(0o1777)


def bind(root: Path, source: str, target: str, *, readonly: bool) -> None:
    where = inside(root, target)
    if Path(source).is_dir():
        where.mkdir(parents=True, exist_ok=True)
    else:
        where.parent.mkdir(parents=True, exist_ok=True)
        where.touch()
    mount("--bind", source, str(where))
    if readonly:
        mount("-o", "remount,bind,ro", str(where))


def become(spec: dict[str, object]) -> None:
    os.setgroups([int(g) for g in spec["groups"]])  # type: ignore[attr-defined]
    os.setgid(int(spec["gid"]))  # type: ignore[call-overload]
    os.setuid(int(spec["uid"]))  # type: ignore[call-overload]
    if spec["no_new_privs"]:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    root = Path(spec["root_dir"])
    base_layout(root)
    for layer in spec["binds"]:
        bind(root, layer["source"], layer["target"], readonly=layer["readonly"])
    for file in spec["files"]:
        inside(root, file["target"]).write_text(file["content"])
    if spec["extra_trust"]:  # the stand-in for a publicly trusted certificate's CA
        with inside(root, "/etc/ssl/certs/ca-certificates.crt").open("a") as bundle:
            bundle.write(spec["extra_trust"])
    # the runtime creates an image's missing working directory (runc: "mkdir -p cwd")
    inside(root, spec["workdir"]).mkdir(parents=True, exist_ok=True)
    if spec["read_only_root"]:
        mount("-o", "remount,bind,ro", str(root))
    os.chroot(root)
    os.chdir(spec["workdir"])
    become(spec)
    env = spec["env"]
    argv = spec["argv"]
    executable = shutil.which(argv[0], path=env.get("PATH", "")) if "/" not in argv[0] else argv[0]
    if executable is None:
        sys.stderr.write(f'exec: "{argv[0]}": executable file not found in $PATH\n')
        sys.exit(127)
    os.execve(executable, argv, env)


if __name__ == "__main__":
    main(sys.argv[1])
