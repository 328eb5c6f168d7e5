"""A real `redis-server` on loopback, for tests and local runs that need the shared store.

Started on a free port with a private temporary directory and no persistence; every
wait is bounded, and `stop` ends the process (terminate, then kill) so none outlives
its owner. `restart` brings it back on the same port, as a store that was away returns.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["LocalRedis", "free_port"]


class LocalRedis:
    def __init__(self, executable: str = "redis-server", start_timeout_s: float = 10.0) -> None:
        found = shutil.which(executable)
        if found is None:
            raise FileNotFoundError(f"{executable} not found (Debian package redis-server)")
        self.executable = found
        self.start_timeout_s = start_timeout_s
        self.port = free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="igw-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> LocalRedis:
        if self.process is not None:
            return self
        args = [
            self.executable,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self._dir.name,
            "--save", "",
            "--appendonly", "no",
            "--protected-mode", "yes",
            "--logfile", str(Path(self._dir.name) / "redis.log"),
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + self.start_timeout_s
        while not _answers_ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on 127.0.0.1:{self.port}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        if process.stderr is not None:
            process.stderr.close()

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> LocalRedis:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def free_port() -> int:
    """A loopback port nobody listens on now (tests give it to the processes they start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False
