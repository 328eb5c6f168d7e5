"""What stops a server before it runs is one line, never a traceback (issue 37).

Each of the seven servers is started, as a user would, on a port another process holds:
it prints exactly one line naming the flag and the port, says nothing of "listening",
and exits 1. A missing file, a certificate that is not one and a bad flag are one line
naming the flag too, exit 2. A server that says "listening" is listening: the port it
prints takes a connection at once. The default ports avoid their neighbours' defaults
(transport/ports.py) and the commands' flags use them.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inference_gateway.cli.main import build_parser
from inference_gateway.transport.ports import DEFAULTS, NEIGHBOURS

IGW = [sys.executable, "-m", "inference_gateway.cli"]
BUSY = "address already in use (another process listens there)"


@pytest.fixture()
def held() -> Iterator[int]:
    """A loopback port another process listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("endpoints:\n  - {name: a, address: 127.0.0.1, port: 9}\n")
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys:\n  - {{client: a, sha256: '{'0' * 64}'}}\n")
    config = tmp_path / "global.yaml"
    config.write_text(
        "clusters:\n  - {name: c1, region: r1, endpoint: 'http://127.0.0.1:9', hourlyCostUsd: 1}\n"
    )
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    return {"endpoints": endpoints, "keys": keys, "global": config, "garbage": garbage}


def _servers(port: int, f: dict[str, Path]) -> dict[str, tuple[list[str], str]]:
    """server → (its arguments, the `--flag value` its one line must name)."""
    return {
        "serve": (["serve", "--endpoints", str(f["endpoints"]), "--port", str(port)],
                  f"--port {port}"),
        "global": (["global", "--config", str(f["global"]), "--port", str(port)],
                   f"--port {port}"),
        "picker": (["picker", "--endpoints", str(f["endpoints"]), "--grpc-port", str(port),
                    "--metrics-port", "0"], f"--grpc-port {port}"),
        "picker-metrics": (["picker", "--endpoints", str(f["endpoints"]), "--grpc-port", "0",
                            "--metrics-port", str(port)], f"--metrics-port {port}"),
        "auth": (["auth", "--api-keys", str(f["keys"]), "--port", str(port)], f"--port {port}"),
        "bbr": (["bbr", "--grpc-port", str(port)], f"--grpc-port {port}"),
        "pd-sidecar": (["pd-sidecar", "--listen", f"127.0.0.1:{port}", "--allow-prefill",
                        "10.0.0.0/8"], f"--listen 127.0.0.1:{port}"),
        "emulate": (["emulate", "--gpu", "H100", "--model", "llama-3.1-8b", "--port", str(port)],
                    f"--port {port}"),
    }  # fmt: skip


def _run_all(commands: dict[str, list[str]]) -> dict[str, tuple[int, str]]:
    """Every command at once (each is a Python start-up), output merged, bounded."""
    procs = {
        name: subprocess.Popen(
            [*IGW, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for name, args in commands.items()
    }
    out = {}
    try:
        for name, proc in procs.items():
            text, _ = proc.communicate(timeout=90)
            out[name] = (proc.returncode, text)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return out


def test_every_server_on_a_busy_port_prints_one_line_and_exits_1(
    held: int, files: dict[str, Path]
) -> None:
    servers = _servers(held, files)
    results = _run_all({name: args for name, (args, _) in servers.items()})
    for name, (code, text) in results.items():
        command = name.removesuffix("-metrics")
        lines = [line for line in text.splitlines() if line.strip()]
        expected = f"igw {command}: cannot listen on 127.0.0.1:{held} ({servers[name][1]}): {BUSY}"
        assert (code, lines) == (1, [expected]), (name, text)


def test_bad_input_at_start_is_one_line_naming_the_flag(files: dict[str, Path]) -> None:
    missing = files["keys"].with_name("absent.yaml")
    garbage = files["garbage"]
    results = _run_all(
        {
            "missing-file": ["auth", "--api-keys", str(missing), "--port", "0"],
            "bad-certificate": ["bbr", "--grpc-port", "0", "--tls-cert", str(garbage),
                                "--tls-key", str(garbage)],
            "bad-address": ["serve", "--endpoints", str(files["endpoints"]), "--host",
                            "192.0.2.1", "--port", "0"],
        }
    )  # fmt: skip
    expected = {
        "missing-file": (2, f"igw auth: invalid input in --api-keys {missing}: cannot read file"),
        "bad-certificate": (2, f"igw bbr: invalid input in --tls-cert {garbage}: not a PEM"),
        "bad-address": (1, "igw serve: cannot listen on 192.0.2.1:0 (--host 192.0.2.1)"),
    }
    for name, (code, text) in results.items():
        lines = [line for line in text.splitlines() if line.strip()]
        assert code == expected[name][0] and len(lines) == 1, (name, text)
        assert lines[0].startswith(expected[name][1]), (name, text)


def test_a_bad_flag_is_one_line_with_the_way_to_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(["serve", "--endpoints", "e.yaml", "--port", "eighty"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "igw serve: argument --port: invalid int value: 'eighty' (see `igw serve --help`)\n"
    )


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("command", ["serve", "global"])
def test_listening_is_said_once_the_port_takes_connections(
    command: str, files: dict[str, Path]
) -> None:
    """`igw serve` and `igw global` printed "listening" before they bound (then crashed on
    a busy port); now the line comes from the bound socket, port 0 resolved."""
    args = (
        ["serve", "--endpoints", str(files["endpoints"])]
        if command == "serve"
        else ["global", "--config", str(files["global"])]
    )
    proc = subprocess.Popen(
        [*IGW, *args, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server says it; bounded below
        assert line.startswith(f"igw {command}: listening on http://127.0.0.1:"), line
        port = int(line.split("http://127.0.0.1:")[1].split()[0])
        assert port != 0
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        _stop(proc)


def test_the_picker_says_metrics_off_when_its_metrics_port_is_0(files: dict[str, Path]) -> None:
    """`--metrics-port 0` disables the metrics listener; the line said "metrics on :0"."""
    args = ["picker", "--endpoints", str(files["endpoints"]), "--grpc-port", "0"]
    proc = subprocess.Popen(
        [*IGW, *args, "--metrics-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bounded: the picker starts or exits
        assert line.startswith("igw picker: ext_proc on 127.0.0.1:"), line
        assert line.rstrip().endswith(", metrics off"), line
    finally:
        _stop(proc)


def test_default_ports_are_the_commands_and_miss_the_neighbours() -> None:
    parser = build_parser()
    required = {
        "igw serve": ["--endpoints", "e"], "igw global": ["--config", "g"],
        "igw pd-sidecar": ["--allow-prefill", "10.0.0.0/8"],
    }  # fmt: skip
    for (command, flag), port in DEFAULTS.items():
        args = parser.parse_args([command.split()[1], *required.get(command, [])])
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        assert str(value).rpartition(":")[2] == str(port), (command, flag, value)
        if command != "igw pd-sidecar":  # it takes vLLM's port in a decode pod, on purpose
            assert port not in NEIGHBOURS, (command, flag, NEIGHBOURS.get(port))
    assert len(set(DEFAULTS.values())) == len(DEFAULTS), "two servers share a default port"


def test_the_held_port_fixture_holds(held: int) -> None:
    """The busy-port test proves something only if the port is really taken."""
    with socket.socket() as probe, pytest.raises(OSError):
        probe.bind(("127.0.0.1", held))
