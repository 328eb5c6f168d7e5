"""Start a rendered container the way the kubelet and a container runtime would, and probe it.

What it does as the kubelet does (Kubernetes v1.32 "Pods", "Configure Liveness,
Readiness and Startup Probes", "Define a Command and Arguments for a Container"):

* **Command.** `command` replaces the image's Entrypoint and `args` its Cmd; with
  `command` and no `args` the image's Cmd is dropped. `$(VAR)` in command, args and env
  values expands to an earlier env var of the container, `$$` escapes; an unknown
  reference stays as written.
* **Environment.** The image's Env, then the container's `env` in order (literal values,
  `fieldRef`, `secretKeyRef`, `configMapKeyRef`, `optional` honoured), then
  `KUBERNETES_SERVICE_HOST`/`_PORT` (always set, `enableServiceLinks` or not) and
  `HOSTNAME`. No `HOME` unless the image or the spec sets one.
* **Identity.** `runAsUser`/`runAsGroup` from the container's securityContext over the
  pod's; `fsGroup` and `supplementalGroups` as supplementary groups; the uid has no
  passwd entry; `allowPrivilegeEscalation: false` sets no_new_privs.
* **Filesystem.** The image's layers, `readOnlyRootFilesystem`, emptyDir (a folder of the
  pod's, mode 0777, shared by its containers), ConfigMap and Secret volumes (`items`,
  `defaultMode`, read-only), the projected service-account token, `subPath`; see
  container_init.py.
* **Network.** A network namespace of the pod's own on the pod network (podnet.py),
  shared by its containers (they reach each other on 127.0.0.1); a container's ports are
  what it binds there; probes come from the node's address.
* **Probes.** startup, then readiness and liveness: `grpc` (grpc.health.v1 Check with the
  probe's `service`), `httpGet` (2xx and 3xx pass; named ports resolved against the
  container's ports), `tcpSocket`; each attempt bounded by `timeoutSeconds` (default 1),
  first after `initialDelaySeconds`, success within `failureThreshold` x `periodSeconds`.

What it does not do (so a green run here is necessary, not sufficient): no image pull,
cgroups (CPU and memory limits and an emptyDir's `sizeLimit` are not enforced, and a
`medium: Memory` emptyDir is a folder, not a tmpfs), seccomp filter, capability sets beyond
what a non-root uid has, PID namespace, DNS (names resolve only through the pod's
/etc/hosts), projected token rotation, or volume types other than those above (a spec
that uses one fails here with its name). Probes are sent more often than `periodSeconds`
to save test time; the deadline is still the spec's own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

INIT = Path(__file__).with_name("container_init.py")
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
PROBE_STEP_S = 0.2


class PodStartError(AssertionError):
    """The container could not be started as specified, or a probe did not pass in time."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion (k8s.io/kubernetes third_party/forked/golang/expansion)."""

    def one(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        return env.get(match[1], match[0])

    return _REFERENCE.sub(one, text)


def parse_quantity(text: str | int) -> int:
    """A Kubernetes memory quantity (`64Mi`, `1G`, `512`) in bytes."""
    units = {
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "k": 10**3,
        "M": 10**6,
        "G": 10**9,
        "T": 10**12,
    }
    text = str(text)
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(text)


@dataclass(frozen=True)
class Image:
    """What the container runtime reads from an image: its config and its layers."""

    name: str
    config: Mapping[str, Any]  # Entrypoint, Cmd, Env, User, WorkingDir
    layers: tuple[tuple[str, str], ...]  # (host folder, path in the image), read-only


@dataclass
class PodContext:
    """What the pod's containers see of the cluster, resolved to test values."""

    name: str
    namespace: str
    pod_ip: str
    netns: str
    api_host: str
    api_port: int
    secrets: Mapping[str, Mapping[str, str]]  # name -> key -> value
    config_maps: Mapping[str, Mapping[str, str]]
    service_account: Mapping[str, str] | None  # token, ca.crt, namespace; None: not mounted
    hosts: Mapping[str, str] = field(default_factory=dict)  # extra /etc/hosts names -> IP
    #: PEM CAs the container trusts beside the image's bundle: test CAs standing in for
    #: the public CAs that sign what a pod reaches over TLS (an ACM certificate)
    extra_trust: str = ""
    #: the pod's own folder: its emptyDir volumes live here, shared by its containers
    volume_root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="igw-pod-")))


@dataclass(eq=False)
class Container:
    """One container of a rendered pod spec, started as root spec and process."""

    pod: Mapping[str, Any]  # the pod template's spec
    spec: Mapping[str, Any]  # the container
    image: Image
    context: PodContext
    #: what the node adds to the environment (the GPU device plugin's variables)
    extra_env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    grace_s: float = 30.0
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="igw-ctr-")))
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0

    # ------------------------------------------------------------------ resolution

    def identity(self) -> tuple[int, int, list[int], bool]:
        pod_sc = self.pod.get("securityContext") or {}
        sc = self.spec.get("securityContext") or {}
        user = sc.get("runAsUser", pod_sc.get("runAsUser"))
        if user is None:
            user = int(str(self.image.config.get("User") or "0").split(":")[0])
        group = sc.get("runAsGroup", pod_sc.get("runAsGroup", 0))
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) and int(user) == 0:
            raise PodStartError(f"{self.name}: runAsNonRoot with uid 0 (the kubelet refuses)")
        groups = [int(g) for g in pod_sc.get("supplementalGroups", [])]
        if "fsGroup" in pod_sc:
            groups.insert(0, int(pod_sc["fsGroup"]))
        no_new_privs = sc.get("allowPrivilegeEscalation") is False
        return int(user), int(group), groups, no_new_privs

    @property
    def name(self) -> str:
        return f"{self.context.name}/{self.spec['name']}"

    def _value_from(self, source: Mapping[str, Any]) -> str | None:
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            fields = {
                "metadata.name": self.context.name,
                "metadata.namespace": self.context.namespace,
                "status.podIP": self.context.pod_ip,
                "spec.nodeName": "node-0",
                "spec.serviceAccountName": self.pod.get("serviceAccountName", "default"),
            }
            if path not in fields:
                raise PodStartError(f"{self.name}: fieldRef {path} is not modelled")
            return fields[path]
        for kind, store in (
            ("secretKeyRef", self.context.secrets),
            ("configMapKeyRef", self.context.config_maps),
        ):
            if kind in source:
                ref = source[kind]
                value = store.get(ref["name"], {}).get(ref["key"])
                if value is None and not ref.get("optional"):
                    raise PodStartError(
                        f"{self.name}: {kind} {ref['name']}/{ref['key']} does not exist "
                        "(the kubelet would leave the container in CreateContainerConfigError)"
                    )
                return value
        raise PodStartError(f"{self.name}: valueFrom {sorted(source)} is not modelled")

    def environment(self) -> dict[str, str]:
        env = dict(self.image.config.get("Env") or {})
        for source in self.spec.get("envFrom", []):
            for kind, store in (
                ("configMapRef", self.context.config_maps),
                ("secretRef", self.context.secrets),
            ):
                if kind in source:
                    found = store.get(source[kind]["name"])
                    if found is None and not source[kind].get("optional"):
                        raise PodStartError(f"{self.name}: envFrom {source[kind]['name']} missing")
                    env.update({source.get("prefix", "") + k: v for k, v in (found or {}).items()})
        for item in self.spec.get("env", []):
            if "valueFrom" in item:
                value = self._value_from(item["valueFrom"])
                if value is not None:
                    env[item["name"]] = value
            else:
                env[item["name"]] = expand(str(item.get("value", "")), env)
        env.update(self.extra_env)
        env.setdefault("HOSTNAME", self.context.name)
        env["KUBERNETES_SERVICE_HOST"] = self.context.api_host
        env["KUBERNETES_SERVICE_PORT"] = str(self.context.api_port)
        env["KUBERNETES_SERVICE_PORT_HTTPS"] = str(self.context.api_port)
        return env

    def argv(self, env: Mapping[str, str]) -> list[str]:
        command = self.spec.get("command")
        args = self.spec.get("args")
        if command is None:
            command = list(self.image.config.get("Entrypoint") or [])
            if args is None:
                args = list(self.image.config.get("Cmd") or [])
        argv = [expand(str(part), env) for part in [*command, *(args or [])]]
        if not argv:
            raise PodStartError(f"{self.name}: no command (image {self.image.name} has none)")
        return argv

    def _volume_files(self, name: str, source: Mapping[str, Any], data: Mapping[str, str]) -> str:
        folder = self.workdir / "volumes" / name
        folder.mkdir(parents=True, exist_ok=True)
        mode = int(source.get("defaultMode", 0o644))
        items = source.get("items")
        chosen = (
            [(i["key"], i["path"], int(i.get("mode", mode))) for i in items]
            if items
            else [(key, key, mode) for key in data]
        )
        for key, path, file_mode in chosen:
            if key not in data:
                raise PodStartError(f"{self.name}: volume {name}: key {key!r} does not exist")
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(data[key])
            target.chmod(file_mode)
        return str(folder)

    def _volume_source(self, volume: Mapping[str, Any]) -> tuple[str, Any]:
        name = volume["name"]
        if "emptyDir" in volume:
            folder = self.context.volume_root / "empty-dir" / name
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o777)
            return "folder", str(folder)
        for kind, store, key in (
            ("configMap", self.context.config_maps, "name"),
            ("secret", self.context.secrets, "secretName"),
        ):
            if kind in volume:
                source = volume[kind]
                data = store.get(source[key])
                if data is None:
                    if source.get("optional"):
                        data = {}
                    else:
                        raise PodStartError(
                            f"{self.name}: {kind} {source[key]!r} of volume {name} does not "
                            "exist (the pod would stay in ContainerCreating)"
                        )
                return "files", self._volume_files(name, source, data)
        raise PodStartError(f"{self.name}: volume {name}: {sorted(volume)} is not modelled")

    def root_spec(self) -> dict[str, Any]:
        env = self.environment()
        uid, gid, groups, no_new_privs = self.identity()
        sc = self.spec.get("securityContext") or {}
        volumes = {v["name"]: v for v in self.pod.get("volumes", [])}
        binds = [{"source": s, "target": t, "readonly": True} for s, t in self.image.layers]
        for mount in self.spec.get("volumeMounts", []):
            if mount["name"] not in volumes:
                raise PodStartError(f"{self.name}: volumeMount {mount['name']} has no volume")
            kind, source = self._volume_source(volumes[mount["name"]])
            path = os.path.join(source, mount["subPath"]) if mount.get("subPath") else source
            readonly = kind == "files" or bool(mount.get("readOnly"))
            binds.append({"source": path, "target": mount["mountPath"], "readonly": readonly})
        account = self.context.service_account
        if account is not None and self.pod.get("automountServiceAccountToken", True):
            folder = self.workdir / "serviceaccount"
            folder.mkdir(exist_ok=True)
            for key, value in account.items():
                (folder / key).write_text(value)
                (folder / key).chmod(0o644)
            binds.append(
                {
                    "source": str(folder),
                    "target": "/var/run/secrets/kubernetes.io/serviceaccount",
                    "readonly": True,
                }
            )
        hosts = [
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
            f"{self.context.pod_ip}\t{self.context.name}",
        ]
        hosts += [f"{ip}\t{name}" for name, ip in self.context.hosts.items()]
        root = self.workdir / "rootfs"
        root.mkdir(exist_ok=True)
        return {
            "root_dir": str(root),
            "binds": binds,
            "files": [
                {"target": "/etc/hosts", "content": "\n".join(hosts) + "\n"},
                {"target": "/etc/hostname", "content": self.context.name + "\n"},
                {"target": "/etc/resolv.conf", "content": "options ndots:5 attempts:1\n"},
            ],
            "extra_trust": self.context.extra_trust,
            "read_only_root": bool(sc.get("readOnlyRootFilesystem")),
            "uid": uid,
            "gid": gid,
            "groups": groups,
            "no_new_privs": no_new_privs,
            "env": env,
            "workdir": self.spec.get("workingDir") or self.image.config.get("WorkingDir") or "/",
            "argv": self.argv(env),
        }

    def mounted_file(self, path: str) -> str:
        """The content of the file the container sees at PATH through one of its volumes."""
        for bind in self.root_spec()["binds"]:
            prefix = bind["target"].rstrip("/") + "/"
            if path.startswith(prefix):
                return (Path(bind["source"]) / path[len(prefix) :]).read_text()
        raise PodStartError(f"{self.name}: no volume holds {path}")

    # ------------------------------------------------------------------ life cycle

    @property
    def log_path(self) -> Path:
        return self.workdir / "container.log"

    def start(self) -> None:
        spec_path = self.workdir / "root.json"
        spec_path.write_text(json.dumps(self.root_spec()))
        argv = [
            "nsenter",
            f"--net=/run/netns/{self.context.netns}",
            "--",
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            sys.executable,
            str(INIT),
            str(spec_path),
        ]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.started_at = time.monotonic()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL after GRACE_S; the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    # ------------------------------------------------------------------ probes

    def port_number(self, port: int | str) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for declared in self.spec.get("ports", []):
            if declared.get("name") == port:
                return int(declared["containerPort"])
        raise PodStartError(f"{self.name}: probe names port {port!r}, which the container lacks")

    def probe_once(self, probe: Mapping[str, Any]) -> str | None:
        """None when the probe passes, else why it failed."""
        timeout = float(probe.get("timeoutSeconds", 1))
        host = self.context.pod_ip
        if "grpc" in probe:
            port = self.port_number(probe["grpc"]["port"])
            request = health_pb2.HealthCheckRequest(service=probe["grpc"].get("service", ""))
            with grpc.insecure_channel(f"{host}:{port}") as channel:
                try:
                    status = health_pb2_grpc.HealthStub(channel).Check(request, timeout=timeout)
                except grpc.RpcError as error:
                    return f"grpc {error.code().name}"  # type: ignore[attr-defined]
            serving = health_pb2.HealthCheckResponse.SERVING
            return None if status.status == serving else f"grpc status {status.status}"
        if "httpGet" in probe:
            get = probe["httpGet"]
            port = self.port_number(get["port"])
            url = f"{get.get('scheme', 'HTTP').lower()}://{host}:{port}{get.get('path', '/')}"
            try:
                with urllib.request.urlopen(url, timeout=timeout) as answer:
                    return None if answer.status < 400 else f"HTTP {answer.status}"
            except urllib.error.HTTPError as error:
                return f"HTTP {error.code}"
            except (OSError, urllib.error.URLError) as error:
                return f"GET {url}: {error}"
        if "tcpSocket" in probe:
            port = self.port_number(probe["tcpSocket"]["port"])
            try:
                socket.create_connection((host, port), timeout=timeout).close()
            except OSError as error:
                return f"tcp {port}: {error}"
            return None
        raise PodStartError(f"{self.name}: probe {sorted(probe)} is not modelled")

    def await_probes(self) -> dict[str, float | None]:
        """Seconds from the start until each probe passed (None: the spec has none).

        Readiness and liveness are probed once startup has passed, as the kubelet does."""
        passed: dict[str, float | None] = {"startupProbe": self.await_probe("startupProbe", 0)}
        after = passed["startupProbe"] or 0.0
        for kind in ("readinessProbe", "livenessProbe"):
            passed[kind] = self.await_probe(kind, after)
        if self.process is not None and self.process.poll() is not None:
            # a container without probes is ready while it runs (pod condition Ready)
            raise PodStartError(
                f"{self.name} exited with {self.process.returncode}; its log:\n{self.log()[-4000:]}"
            )
        return passed

    def await_probe(self, kind: str, since_s: float) -> float | None:
        """Seconds from the start until probe KIND passed, probing from SINCE_S on."""
        probe = self.spec.get(kind)
        if probe is None:
            return None
        started = self.started_at + since_s
        delay = float(probe.get("initialDelaySeconds", 0))
        window = delay + float(probe.get("periodSeconds", 10)) * int(
            probe.get("failureThreshold", 3)
        )
        deadline = started + window
        time.sleep(max(0.0, started + delay - time.monotonic()))
        why = "never probed"
        while time.monotonic() <= deadline:
            if self.process is not None and self.process.poll() is not None:
                raise PodStartError(
                    f"{self.name} exited with {self.process.returncode} before its {kind} "
                    f"passed; its log:\n{self.log()[-4000:]}"
                )
            why = self.probe_once(probe) or ""
            if not why:
                return time.monotonic() - self.started_at
            time.sleep(PROBE_STEP_S)
        raise PodStartError(
            f"{self.name}: {kind} did not pass within {window:.0f} s ({why}); its log:\n"
            f"{self.log()[-4000:]}"
        )
