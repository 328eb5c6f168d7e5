"""The `vllm` stand-in: vLLM v0.11.0's start-up failures, and the pod it serves.

The user rule is tested for real, not by patching `pwd`: the stand-in runs in a user
namespace as uid 10001 (`unshare --user --map-user=10001`, which needs no privilege),
where the uid has no passwd entry, exactly as in a pod with `runAsUser: 10001` and the
image's /etc/passwd. There, with no `USER`/`LOGNAME`/`LNAME`/`USERNAME`, torch 2.8's
inductor cache code (torch/_inductor/runtime/cache_dir_utils.py `default_cache_dir`,
called at import from compiler_bisector.py and codecache.py) raises
`KeyError: 'getpwuid(): uid not found: 10001'`, and vLLM v0.11.0 dies before it parses its
arguments (observed with the vLLM 0.11.0 wheel; emulator/vllm_startup.py). Each rendered
model-server container's own env is used, so the test fails on a spec that lacks the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from model_files import write_model_files
from rendered_model_servers import RenderedVllm, container_params

from inference_gateway.emulator import vllm_startup
from inference_gateway.emulator.vllm_args import parse_serve_args
from inference_gateway.emulator.vllm_cli import EMULATED_GPU_ENV, main
from inference_gateway.emulator.vllm_pod import pod_settings
from inference_gateway.errors import ConfigError

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
USER_VARIABLES = ("LOGNAME", "USER", "LNAME", "USERNAME")


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A short folder in place of pytest's: the stand-in binds a Unix socket under TMPDIR
    as vLLM's ZMQ `ipc://` endpoints do, and a socket path has at most 107 bytes (Linux
    `sockaddr_un`), which pytest's folders under an xdist worker outgrow."""
    folder = Path(tempfile.mkdtemp(prefix="igw-vllm-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _base_env(tmp_path: Path) -> dict[str, str]:
    """A pod-like environment: no user variables, writable HOME and temp dir only."""
    env = {k: v for k, v in os.environ.items() if k not in USER_VARIABLES}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    env.update(
        HOME=str(tmp_path / "home"),
        TMPDIR=str(tmp_path / "tmp"),
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    for name in ("home", "tmp"):
        (tmp_path / name).mkdir(exist_ok=True)
    return env


def _as_uid_without_passwd_entry(command: list[str]) -> list[str]:
    return ["unshare", "--user", "--map-user=10001", "--map-group=10001", *command]


def _stand_in(*args: str) -> list[str]:
    return [sys.executable, "-m", "inference_gateway.emulator.vllm_cli", *args]


def test_the_uid_namespace_has_no_passwd_entry() -> None:
    """The premise of the tests below: uid 10001 is unknown to /etc/passwd in there."""
    probe = "import os, pwd; print(os.getuid()); pwd.getpwuid(os.getuid())"
    run = subprocess.run(
        _as_uid_without_passwd_entry([sys.executable, "-c", probe]),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.stdout.strip() == "10001"
    assert "KeyError: 'getpwuid(): uid not found: 10001'" in run.stderr


@pytest.mark.parametrize(
    ("extra", "fails"),
    [
        ({}, True),
        ({"TORCHINDUCTOR_CACHE_DIR": "{tmp}/inductor"}, True),  # codecache still asks
        ({"USER": "vllm"}, False),
        ({"LOGNAME": "vllm"}, False),
    ],
    ids=["no-user", "inductor-dir-only", "USER", "LOGNAME"],
)
def test_a_uid_without_passwd_entry_needs_a_user_variable(
    tmp_path: Path, extra: dict[str, str], fails: bool
) -> None:
    env = _base_env(tmp_path) | {k: v.format(tmp=tmp_path) for k, v in extra.items()}
    run = subprocess.run(
        _as_uid_without_passwd_entry(_stand_in("serve", "--help")),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if fails:
        assert run.returncode == 1
        assert "KeyError: 'getpwuid(): uid not found: 10001'" in run.stderr
        assert "default_cache_dir" in run.stderr
    else:
        assert run.returncode == 0, run.stderr
        assert "usage: vllm serve [model_tag] [options]" in run.stdout
        assert (tmp_path / "tmp" / "torchinductor_vllm").is_dir()  # made at import


@pytest.mark.parametrize("rendered", container_params())
def test_rendered_model_servers_start_as_their_uid(tmp_path: Path, rendered: RenderedVllm) -> None:
    """The rendered container's own env (HOME, HF_HOME, USER, ...), its uid, no passwd
    entry: importing vLLM must get past torch's getpass call (`vllm serve --help`)."""
    env = _base_env(tmp_path)
    for item in rendered.container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
    env["HOME"] = str(tmp_path / "home")  # the mounted emptyDir, here
    run = subprocess.run(
        _as_uid_without_passwd_entry(_stand_in("serve", "--help")),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, f"{rendered.where}: {run.stderr[-600:]}"


# --------------------------------------------------------------------------- start checks


@pytest.fixture
def pod_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The process env of a pod whose writable mounts live under tmp_path."""
    for name in USER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("USER", "vllm")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "models" / "huggingface"))
    monkeypatch.setenv(EMULATED_GPU_ENV, "A10G")
    for name in ("XDG_CACHE_HOME", "VLLM_CACHE_ROOT", "HF_HUB_CACHE", "VLLM_RPC_BASE_PATH"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _settings(*flags: str) -> Any:
    argv = ["serve", MODEL, "--max-model-len", "4096", *flags]
    return pod_settings(parse_serve_args(argv).options, argv)


@pytest.mark.parametrize("rendered", container_params())
def test_the_rendered_flags_map_onto_the_pod(
    pod_env: Path, monkeypatch: pytest.MonkeyPatch, rendered: RenderedVllm
) -> None:
    """vLLM's start checks pass on the GPU the pod's node affinity names, and the pod
    serves what the flags say."""
    monkeypatch.setenv(EMULATED_GPU_ENV, rendered.gpu)
    argv = rendered.container["command"][1:] + rendered.container["args"]
    settings = pod_settings(parse_serve_args(argv).options, argv)
    args = rendered.container["args"]
    assert settings.profile.gpu.name == rendered.gpu
    assert args[0].endswith(tuple(settings.profile.model.hf_repos))
    assert settings.profile.tp == int(args[args.index("--tensor-parallel-size") + 1])
    assert settings.served_model_name == args[args.index("--served-model-name") + 1]
    assert settings.max_model_len == int(args[args.index("--max-model-len") + 1])
    if "--enable-lora" in args:
        assert settings.profile.max_loras == int(args[args.index("--max-loras") + 1])
        modules = args[args.index("--lora-modules") + 1 :]
        names = [m.split("=")[0] for m in modules if "=" in m]
        assert list(settings.adapters) == names
    assert (settings.kv_events is not None) == ("--kv-events-config" in args)
    assert settings.auto_tool_choice == ("--enable-auto-tool-choice" in args)
    assert settings.hash_algo == args[args.index("--prefix-caching-hash-algo") + 1]
    assert (settings.host, settings.port) == ("0.0.0.0", int(args[args.index("--port") + 1]))


def test_start_makes_what_vllm_makes(pod_env: Path) -> None:
    settings = _settings("--lora-modules", "sql=org/sql-adapter", "--enable-lora")
    made = vllm_startup.start_effects(settings.plan)
    hub = pod_env / "models" / "huggingface" / "hub"
    assert str(hub / "models--meta-llama--Llama-3.1-8B-Instruct") in made
    assert str(hub / "models--org--sql-adapter") in made
    compile_root = pod_env / "home" / ".cache" / "vllm" / "torch_compile_cache"
    assert any(Path(p).is_relative_to(compile_root) for p in made)
    eager = _settings("--enforce-eager")
    assert not any("torch_compile_cache" in p for p in vllm_startup.start_effects(eager.plan))


@pytest.mark.parametrize("variable", ["VLLM_CACHE_ROOT", "HF_HOME", "VLLM_RPC_BASE_PATH"])
def test_a_path_vllm_writes_at_start_must_be_writable(
    pod_env: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    blocker = pod_env / "read-only-file"
    blocker.write_text("")
    monkeypatch.setenv(variable, str(blocker / "sub"))
    with pytest.raises(OSError):
        vllm_startup.start_effects(_settings().plan)


@pytest.mark.parametrize(
    ("flags", "error", "message"),
    [
        (("--max-model-len", "200000"), ValueError, "greater than the derived max_model_len"),
        (("--gpu-memory-utilization", "0.75", "--max-model-len", "131072"), ValueError,
         "KV cache is needed"),
        (("--tensor-parallel-size", "3"), ValueError, "must be divisible by tensor parallel"),
        (("--enable-auto-tool-choice", "--tool-call-parser", "nope"), KeyError,
         "invalid tool call parser: nope"),
        (("--lora-modules", "a=org/a"), ValueError, "LoRA is not enabled"),
        (("--enable-lora", "--lora-modules", "a=org/a", "a=org/b"), ValueError,
         "has already been loaded"),
    ],
)  # fmt: skip
def test_vllm_start_checks(
    pod_env: Path, flags: tuple[str, ...], error: type[Exception], message: str
) -> None:
    argv = ["serve", MODEL, *flags]
    options = parse_serve_args(argv).options
    with pytest.raises(error, match=message):
        pod_settings(options, argv)


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["serve", "org/unknown-model"], "has no emulator model profile"),
        (["serve", MODEL, "--api-key", "secret"], "checks no API key"),
        (["serve", MODEL, "--block-size", "32"], "models 16 only"),
        (["serve", MODEL, "--served-model-name", "a", "b"], "serves one name"),
    ],
)
def test_what_the_emulator_cannot_honour_is_refused(
    pod_env: Path, argv: list[str], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem) as refused:
        pod_settings(parse_serve_args(argv).options, argv)
    assert "secret" not in str(refused.value)  # a refused key is never echoed


def test_the_gpu_comes_from_the_harness(
    pod_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(EMULATED_GPU_ENV)
    assert main(["serve", MODEL]) == 1
    assert f"{EMULATED_GPU_ENV} is not set" in capsys.readouterr().err


def test_a_model_path_ending_in_a_known_repository_maps(pod_env: Path) -> None:
    argv = ["serve", f"s3://weights/{MODEL}", "--max-model-len", "4096"]
    settings = pod_settings(parse_serve_args(argv).options, argv)
    assert settings.profile.model.name == "llama-3.1-8b"
    assert settings.served_model_name == f"s3://weights/{MODEL}"  # vLLM's default name


def test_the_hash_algo_and_a_tokenizer_directory_reach_the_pod(pod_env: Path) -> None:
    """What the pod's KV events hash: vLLM's --prefix-caching-hash-algo, and the token
    ids of --tokenizer when it names a local directory (a hub name cannot be read)."""
    model = write_model_files(pod_env / "tokenizer")
    settings = _settings("--prefix-caching-hash-algo", "sha256_cbor", "--tokenizer", str(model))
    assert (settings.hash_algo, settings.tokenizer) == ("sha256_cbor", str(model))
    settings = _settings("--tokenizer", "meta-llama/Llama-3.1-8B-Instruct")
    assert (settings.hash_algo, settings.tokenizer) == ("sha256", None)


# --------------------------------------------------------------------------- serving


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serves_health_and_models_on_the_given_port(tmp_path: Path) -> None:
    port = _free_port()
    env = _base_env(tmp_path) | {
        "USER": "vllm",
        EMULATED_GPU_ENV: "H100",
        "HF_HOME": str(tmp_path / "hf"),
    }
    argv = ["serve", MODEL, "--served-model-name", "chat", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--max-model-len", "8k", "--enable-lora"]
    argv += ["--max-loras", "2", "--lora-modules", "sql=org/sql", "support=org/support"]
    proc = subprocess.Popen(_stand_in(*argv), env=env, stdout=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "the stand-in exited"
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=1) as health:
                    if health.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "no /health within 30 s"
            time.sleep(0.1)
        with urllib.request.urlopen(f"{base}/v1/models", timeout=5) as answer:
            models = json.loads(answer.read())["data"]
        assert [(m["id"], m["parent"]) for m in models] == [
            ("chat", None),
            ("sql", "chat"),
            ("support", "chat"),
        ]
        assert models[0]["max_model_len"] == 8000
        # no --enable-auto-tool-choice: tools with the default ("auto") choice get a 400
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        chat = urllib.request.Request(
            f"{base}/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(chat, timeout=5)
        assert refused.value.code == 400
        assert "--enable-auto-tool-choice" in json.loads(refused.value.read())["error"]["message"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    assert (tmp_path / "hf" / "hub" / "models--meta-llama--Llama-3.1-8B-Instruct").is_dir()


def test_an_unknown_flag_exits_2_before_any_port_opens(tmp_path: Path) -> None:
    env = _base_env(tmp_path) | {"USER": "vllm", EMULATED_GPU_ENV: "H100"}
    run = subprocess.run(
        _stand_in("serve", MODEL, "--no-such-flag"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.strip().endswith("vllm: error: unrecognized arguments: --no-such-flag")
