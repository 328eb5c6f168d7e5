"""Build the gateway image's Python environment on this machine from its Dockerfile's steps.

There is no Docker engine here, yet the tests must run what the image runs. This replays
gateway_src/Dockerfile: the build stage's COPY and RUN steps run in a staging copy of the
build context, inside a private mount namespace where the output's ``usr-local/`` is bound
at ``/usr/local`` — so every path pip writes (console-script shebangs, ``site-packages``)
is the path the image has, and the pod tests mount the same folder at ``/usr/local`` in
each container. The result, under ``--out`` (``.image/`` from ``make image-env``):

    usr-local/     the image's /usr/local: a Python 3.11 (a venv over the interpreter the
                   tests run on, standing in for ``python:3.11-slim``'s) and what the build
                   stage installed
    image.json     the final stage's config: Entrypoint, Cmd, Env, User, WorkingDir,
                   ExposedPorts (what a container runtime reads)

What is replayed and what is refused, so the copy cannot silently drift from the image:

* ``FROM python:3.X-slim``: the base interpreter is ``--python``'s own (the interpreter the
  tests run on; from a venv, its base), which must be 3.X; the venv made over it at
  ``/usr/local`` stands in for the base image's Python there.
* ``RUN pip install … --prefix=/install …`` in the build stage runs with ``/install``
  read as ``/usr/local``: the final stage's ``COPY --from=build /install /usr/local`` is
  that mapping, and it is required to be exactly that.
* The final stage may ``RUN useradd``/``groupadd`` (the OS user database, which the pod
  tests deliberately lack: Kubernetes' ``runAsUser`` needs no passwd entry); any other
  final-stage RUN, and any instruction not listed here, is an error.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

#: what the final stage may RUN without a replay: it changes the OS user database only
USER_DATABASE_COMMANDS = ("useradd", "groupadd")
KNOWN = {"FROM", "WORKDIR", "COPY", "RUN", "ENV", "USER", "EXPOSE", "ENTRYPOINT", "CMD"}


class ReplayError(Exception):
    """The Dockerfile holds a step this replay cannot reproduce faithfully."""


@dataclass
class Stage:
    """One ``FROM`` … block of the Dockerfile, its instructions in order."""

    base: str
    name: str | None
    steps: list[tuple[str, str]] = field(default_factory=list)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, continuation lines joined."""
    joined: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        joined.append(pending + line)
        pending = ""
    if pending:
        raise ReplayError("the Dockerfile ends inside a continued line")
    pairs = []
    for line in joined:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword not in KNOWN:
            raise ReplayError(f"instruction {keyword} is not replayed (tools/image_env.py)")
        pairs.append((keyword, rest.strip()))
    return pairs


def stages(text: str) -> list[Stage]:
    """The Dockerfile's stages, each with its steps."""
    found: list[Stage] = []
    for keyword, rest in instructions(text):
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            found.append(Stage(base=words[0], name=name))
        elif not found:
            raise ReplayError(f"{keyword} before the first FROM")
        else:
            found[-1].steps.append((keyword, rest))
    return found


def exec_form(rest: str) -> list[str]:
    """An ENTRYPOINT / CMD argument: only the JSON exec form (a shell form adds `sh -c`)."""
    try:
        value = json.loads(rest)
    except ValueError as exc:
        raise ReplayError(f"{rest!r}: only the JSON exec form is replayed") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ReplayError(f"{rest!r}: expected a JSON list of strings")
    return value


def env_pairs(rest: str) -> dict[str, str]:
    """``ENV K=V [K2=V2 …]`` (the legacy ``ENV K V`` form too)."""
    words = shlex.split(rest)
    if len(words) >= 2 and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(word.split("=", 1) for word in words)


def image_config(final: Stage) -> dict[str, object]:
    """The final stage's runtime config, as ``docker inspect`` would show it."""
    config: dict[str, object] = {
        "Entrypoint": None,
        "Cmd": None,
        "Env": {"PATH": "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"},
        "User": "0",
        "WorkingDir": "/",
        "ExposedPorts": [],
    }
    env: dict[str, str] = dict(config["Env"])  # type: ignore[call-overload]
    for keyword, rest in final.steps:
        if keyword == "ENTRYPOINT":
            config["Entrypoint"] = exec_form(rest)
            config["Cmd"] = None  # Docker: a new ENTRYPOINT resets an inherited CMD
        elif keyword == "CMD":
            config["Cmd"] = exec_form(rest)
        elif keyword == "ENV":
            env.update(env_pairs(rest))
        elif keyword == "USER":
            config["User"] = rest
        elif keyword == "WORKDIR":
            config["WorkingDir"] = rest
        elif keyword == "EXPOSE":
            config["ExposedPorts"] = [int(p.split("/")[0]) for p in rest.split()]
    config["Env"] = env
    return config


def check_final_stage(final: Stage, build_name: str | None) -> None:
    """Refuse a final stage whose steps the replay would not reproduce."""
    copies = [rest for keyword, rest in final.steps if keyword == "COPY"]
    expected = f"--from={build_name} /install /usr/local"
    if copies != [expected]:
        raise ReplayError(f"the final stage must COPY exactly {expected!r}; found {copies}")
    for keyword, rest in final.steps:
        if keyword == "RUN" and shlex.split(rest)[0] not in USER_DATABASE_COMMANDS:
            raise ReplayError(f"final-stage RUN {rest!r} is not replayed")


def base_minor(base: str) -> str:
    """``python:3.11-slim`` -> ``3.11``."""
    image, _, tag = base.partition(":")
    if image != "python" or not tag:
        raise ReplayError(f"base image {base!r}: only python:3.X images are replayed")
    return ".".join(tag.split("-")[0].split(".")[:2])


def copy(context: Path, sources: list[str], workdir: Path, destination: str) -> None:
    """Docker's COPY: a folder's contents go into DESTINATION; files go into it when it
    ends with ``/`` or there are several, else they become it."""
    target = workdir / destination
    into = destination.endswith("/") or len(sources) > 1
    for source in sources:
        path = context / source
        if path.is_dir():
            skip = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "build")
            shutil.copytree(path, target, dirs_exist_ok=True, ignore=skip)
        else:
            file_target = target / path.name if into else target
            file_target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, file_target)


def in_namespace(usr_local: Path, argv: list[str], cwd: Path) -> None:
    """Run ARGV with USR_LOCAL bound at /usr/local, in a mount namespace of its own."""
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare[1:1] = ["--user", "--map-root-user"]
    script = 'mount --bind "$1" /usr/local && shift && exec "$@"'
    env = {
        "PATH": "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(cwd),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CERT"):
        if name in os.environ:
            env[name] = os.environ[name]
    command = [*unshare, "sh", "-c", script, "sh", str(usr_local), *argv]
    subprocess.run(command, cwd=cwd, env=env, check=True)


def build(dockerfile: Path, python: Path, out: Path) -> None:
    """Replay DOCKERFILE into OUT (replacing what was there)."""
    context = dockerfile.parent
    parsed = stages(dockerfile.read_text())
    if len(parsed) != 2:
        raise ReplayError("expected two stages: a build stage and the final image")
    builder, final = parsed
    check_final_stage(final, builder.name)
    minor = base_minor(builder.base)
    if base_minor(final.base) != minor:
        raise ReplayError("the build stage and the final image use different Pythons")
    probe = "import sys, ensurepip; print('%d.%d' % sys.version_info[:2], sys._base_executable)"
    found = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    version, _, base_executable = found.stdout.strip().partition(" ")
    if found.returncode != 0 or version != minor:
        raise ReplayError(f"{python} must be a Python {minor} with venv and ensurepip")
    base_prefix = Path(base_executable).resolve().parent.parent
    if out.exists():
        shutil.rmtree(out)
    usr_local = out / "usr-local"
    usr_local.mkdir(parents=True)
    print(f"==> image environment: {dockerfile} replayed into {out}/ (Python {minor})")
    with tempfile.TemporaryDirectory(prefix="igw-image-build-") as staging_name:
        staging = Path(staging_name)
        in_namespace(usr_local, [base_executable, "-m", "venv", "/usr/local"], staging)
        workdir = staging
        for keyword, rest in builder.steps:
            if keyword == "WORKDIR":
                workdir = staging / rest.lstrip("/")
                workdir.mkdir(parents=True, exist_ok=True)
            elif keyword == "COPY":
                *sources, destination = shlex.split(rest)
                copy(context, sources, workdir, destination)
            elif keyword == "RUN":
                command = rest.replace("--prefix=/install", "--prefix=/usr/local")
                print(f"    RUN {command}")
                in_namespace(usr_local, ["sh", "-c", command], workdir)
            elif keyword not in {"ENV"}:
                raise ReplayError(f"build-stage {keyword} is not replayed")
    config = image_config(final)
    # not part of a real image's config: where the interpreter that stands in for the base
    # image's Python lives, so the pod tests can mount it into each container's root
    config["BasePythonPrefix"] = str(base_prefix)
    (out / "image.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"==> image environment ready: {out}/usr-local (the image's /usr/local)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dockerfile", type=Path, required=True)
    parser.add_argument("--python", type=Path, required=True, help="the base Python 3.X")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        build(args.dockerfile.resolve(), args.python, args.out.resolve())
    except ReplayError as exc:
        print(f"image-env: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"image-env: a step failed (exit {exc.returncode}): {exc.cmd}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
