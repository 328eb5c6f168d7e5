"""What a pod of the tree talks to besides other pods, on the node's address of the pod network.

* **The Kubernetes API.** The fake API server of tests/gateway/kubernetes (a stand-in:
  no API server runs here), served over TLS with a certificate for the node's address
  and requiring the service-account token, so the picker's in-cluster configuration
  (kubernetes_asyncio `load_incluster_config`: `KUBERNETES_SERVICE_HOST`/`_PORT`, the
  token and `ca.crt` under /var/run/secrets/kubernetes.io/serviceaccount) is exercised
  as in a cluster. It runs in a thread with its own event loop.
* **The store.** A real `redis-server` with `requirepass`, bound to the node's address,
  standing in for Valkey / ElastiCache.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway" / "kubernetes"))

from fake_apiserver import FakeApiServer


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def certificate_for(names: list[str], folder: Path, stem: str) -> tuple[Path, Path, Path]:
    """A test CA and a certificate it signs for NAMES (IP addresses or DNS names):
    (CA certificate, certificate, key) as PEM files in FOLDER."""
    now = datetime.datetime.now(datetime.UTC)

    def builder(subject: str, issuer: str, public_key: Any) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        builder(f"{stem} test CA", f"{stem} test CA", ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alternative: list[x509.GeneralName] = []
    for name in names:
        try:
            alternative.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternative.append(x509.DNSName(name))
    cert = (
        builder(names[0], f"{stem} test CA", key.public_key())
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = (folder / f"{stem}-ca.crt", folder / f"{stem}.crt", folder / f"{stem}.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(_key_pem(key))
    return paths


class ApiServerThread:
    """The fake API server over TLS on ADDRESS, in a thread of its own."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.token = secrets.token_urlsafe(24)
        self.folder = Path(tempfile.mkdtemp(prefix="igw-apiserver-"))
        self.ca, cert, key = certificate_for([address], self.folder, "apiserver")
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.server = FakeApiServer()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.port = 0

    def call(self, coroutine: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout=30)

    def start(self) -> ApiServerThread:
        self.thread.start()
        url = self.call(
            self.server.start(self.address, 0, ssl_context=self.context, token=self.token)
        )
        self.port = int(url.rsplit(":", 1)[1])
        return self

    def put(self, collection: str, obj: dict[str, Any]) -> None:
        self.loop.call_soon_threadsafe(self.server.put, collection, obj)

    def service_account(self, namespace: str) -> dict[str, str]:
        """The files of the projected service-account volume."""
        return {"token": self.token, "ca.crt": self.ca.read_text(), "namespace": namespace}

    def stop(self) -> None:
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        shutil.rmtree(self.folder, ignore_errors=True)


class RedisServer:
    """redis-server with a password on ADDRESS, no persistence."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.password = secrets.token_urlsafe(16)
        with socket.socket() as probe:
            probe.bind((address, 0))
            self.port = probe.getsockname()[1]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.address}:{self.port}/0"

    def start(self) -> RedisServer:
        argv = [
            "redis-server",
            "--bind",
            self.address,
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--requirepass",
            self.password,
        ]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.address, self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)


ROUTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"


class EnvoyGateway:
    """The cluster's gateway as the global tier reaches it: the pinned Envoy binary with an
    HTTPS listener on ADDRESS:443 (a test certificate for HOSTNAMES), forwarding each
    route (exact path, method) to a pod address, as Envoy Gateway programs the rendered
    HTTPRoutes' Service backendRefs (endpoints of the Service, not its ClusterIP)."""

    def __init__(
        self, address: str, hostnames: list[str], routes: list[tuple[str, str | None, str, int]]
    ) -> None:
        self.address = address
        self.folder = Path(tempfile.mkdtemp(prefix="igw-envoy-"))
        self.ca, self.cert, self.key = certificate_for(hostnames, self.folder, "gateway")
        self.routes = routes
        self.process: subprocess.Popen[bytes] | None = None

    def bootstrap(self) -> dict[str, Any]:
        routes, clusters = [], []
        for index, (path, method, host, port) in enumerate(self.routes):
            match: dict[str, Any] = {"path": path}
            if method:
                match["headers"] = [{"name": ":method", "string_match": {"exact": method}}]
            routes.append({"match": match, "route": {"cluster": f"c{index}", "timeout": "5s"}})
            endpoint = {"address": {"socket_address": {"address": host, "port_value": port}}}
            clusters.append(
                {
                    "name": f"c{index}",
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "load_assignment": {
                        "cluster_name": f"c{index}",
                        "endpoints": [{"lb_endpoints": [{"endpoint": endpoint}]}],
                    },
                }
            )
        tls = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3."
                "DownstreamTlsContext",
                "common_tls_context": {
                    "tls_certificates": [
                        {
                            "certificate_chain": {"filename": str(self.cert)},
                            "private_key": {"filename": str(self.key)},
                        }
                    ]
                },
            },
        }
        manager = {
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network."
                "http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": "gateway",
                "route_config": {
                    "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": routes}]
                },
                "http_filters": [
                    {
                        "name": "envoy.filters.http.router",
                        "typed_config": {"@type": ROUTER_TYPE},
                    }
                ],
            },
        }
        listener = {
            "name": "https",
            "address": {"socket_address": {"address": self.address, "port_value": 443}},
            "filter_chains": [{"transport_socket": tls, "filters": [manager]}],
        }
        return {
            "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
            "static_resources": {"listeners": [listener], "clusters": clusters},
        }

    def start(self) -> EnvoyGateway:
        from inference_gateway.envoyproxy.process import envoy_binary

        config = self.folder / "envoy.json"
        config.write_text(json.dumps(self.bootstrap()))
        log = (self.folder / "envoy.log").open("wb")
        self.process = subprocess.Popen(
            [
                str(envoy_binary()),
                "-c",
                str(config),
                "--disable-hot-restart",
                "--log-level",
                "warning",
                "--concurrency",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError((self.folder / "envoy.log").read_text())
            try:
                socket.create_connection((self.address, 443), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("Envoy did not bind its listener")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)
