"""`igw tokenizer fetch` against a loopback hub speaking the Hugging Face Hub's download
protocol, through the real `huggingface_hub` client (never the public hub).

The peer answers what the client asks (huggingface_hub `file_download.py`
`get_hf_file_metadata` / `hf_hub_download`, `utils/_http.py` `hf_raise_for_status`):
`HEAD` and `GET /{repo}/resolve/{revision}/{file}` with `X-Repo-Commit`, `ETag` and
`Content-Length`; a missing file is a 404 with `X-Error-Code: EntryNotFound`; a gated
repository without a token is a 401 with `X-Error-Code: GatedRepo`.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from model_files import write_model_files

from inference_gateway.cli import tokenizer as cli
from inference_gateway.cli.main import main
from inference_gateway.protocols.vllm.hf_tokenizer import HFTokenizer

REPO, REVISION, TOKEN = "example-org/tiny-llama", "0123456789abcdef0123456789abcdef01234567", "t0k"


class Hub(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    requests: list[tuple[str, str, str | None]] = []

    def _answer(self, body: bool) -> None:
        Hub.requests.append((self.command, self.path, self.headers.get("Authorization")))
        prefix = f"/{REPO}/resolve/{REVISION}/"
        name = self.path.removeprefix(prefix)
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.send_response(401)
            self.send_header("X-Error-Code", "GatedRepo")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = Hub.files.get(name) if self.path.startswith(prefix) else None
        if data is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("X-Repo-Commit", REVISION)
        self.send_header("ETag", f'"{abs(hash(data))}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    model = write_model_files(tmp_path / "upstream")
    (model / "chat_template.jinja").write_text("{{ messages[0].content }}")
    Hub.files = {p.name: p.read_bytes() for p in model.iterdir()}  # no special_tokens_map
    Hub.requests = []
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # the client's own state
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_files_land_whole_at_the_revision_with_the_token(hub: str, tmp_path: Path) -> None:
    dest = tmp_path / "tokenizers" / "tiny-llama"
    assert cli.fetch(REPO, dest, revision=REVISION, token=TOKEN, endpoint=hub)
    assert sorted(p.name for p in dest.iterdir()) == [
        "chat_template.jinja", "tokenizer.json", "tokenizer_config.json",
    ]  # fmt: skip
    assert not dest.with_name("tiny-llama.partial").exists()
    assert HFTokenizer(dest).prompt_ids({"messages": [{"role": "user", "content": "hi"}]})
    assert all(auth == f"Bearer {TOKEN}" for _, _, auth in Hub.requests)
    asked = len(Hub.requests)
    assert not cli.fetch(REPO, dest, revision=REVISION, token=TOKEN, endpoint=hub)
    assert len(Hub.requests) == asked  # already there: nothing downloaded


def test_a_missing_required_file_fails_and_leaves_nothing(
    hub: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    del Hub.files["tokenizer.json"]
    dest = tmp_path / "tiny"
    argv = ["tokenizer", "fetch", REPO, "--dest", str(dest), "--revision", REVISION]
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    assert main([*argv, "--token-file", str(token), "--endpoint", hub]) == 1
    assert "tokenizer.json" in capsys.readouterr().err and not dest.exists()


def test_the_sidecar_retries_until_the_token_arrives_then_waits(
    hub: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Secret is mounted `optional`: until External Secrets syncs it, the gated
    repository refuses; the sidecar retries, re-reading the token file, and stays up."""
    monkeypatch.setattr(cli, "FIRST_RETRY_S", 0.05)
    token, dest = tmp_path / "token", tmp_path / "tiny"
    args = argparse.Namespace(
        model=REPO, dest=dest, revision=REVISION, token_file=token, endpoint=hub,
        keep_running=True,
    )  # fmt: skip
    stop = threading.Event()
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(cli.fetch_loop(args, stop)))
    worker.start()
    try:
        for _ in range(100):  # bounded: a few refusals first
            if sum(1 for r in Hub.requests if r[2] is None) >= 2:
                break
            stop.wait(0.02)
        assert not dest.exists()
        token.write_text(TOKEN)
        for _ in range(200):
            if (dest / "tokenizer.json").is_file():
                break
            stop.wait(0.05)
        assert (dest / "tokenizer.json").is_file() and worker.is_alive()
    finally:
        stop.set()
        worker.join(timeout=10)
    assert result == [0]


def test_sigterm_ends_the_sidecar_in_the_middle_of_a_download(tmp_path: Path) -> None:
    """A hub that takes the connection and never answers (the client would wait, then
    retry, for tens of seconds): SIGTERM still ends the sidecar at once, exit 0, with
    no `DIR` left (a pod's deletion waits for every container: tests/pods)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent.settimeout(60)
        dest = tmp_path / "tiny"
        env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_XET": "1"}
        argv = ["tokenizer", "fetch", REPO, "--dest", str(dest), "--keep-running"]
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "inference_gateway.cli.main", *argv, "--endpoint", endpoint],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            connection, _ = silent.accept()  # the client is in its first request now
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
            connection.close()
        finally:
            proc.kill()
            proc.wait()
    assert not dest.exists()
