"""tools/image_env.py replays the Dockerfile faithfully or refuses: what it accepts and reads.

The image config rules are Docker's ("Dockerfile reference": ENTRYPOINT resets a CMD
inherited from the base image; ENV's `K=V` and legacy `K V` forms; the exec form).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("image_env", ROOT / "tools" / "image_env.py")
assert _spec is not None and _spec.loader is not None
image_env = importlib.util.module_from_spec(_spec)
sys.modules["image_env"] = image_env
_spec.loader.exec_module(image_env)

BUILD = """\
FROM python:3.11-slim AS build
WORKDIR /src
COPY requirements.lock ./
RUN pip install --prefix=/install \\
    --require-hashes -r requirements.lock
"""


def replay_check(final: str) -> None:
    builder, last = image_env.stages(BUILD + final)
    image_env.check_final_stage(last, builder.name)


def test_continuation_lines_join_and_comments_drop() -> None:
    (stage,) = image_env.stages(BUILD)
    assert stage.steps[-1] == (
        "RUN",
        "pip install --prefix=/install --require-hashes -r requirements.lock",
    )


@pytest.mark.parametrize("step", ["ADD x /y", "HEALTHCHECK CMD true", "VOLUME /data"])
def test_an_instruction_it_cannot_replay_is_refused(step: str) -> None:
    with pytest.raises(image_env.ReplayError, match="not replayed"):
        image_env.stages(BUILD + step + "\n")


def test_the_final_stage_may_only_add_a_user_besides_copying_the_install_prefix() -> None:
    replay_check(
        "FROM python:3.11-slim\nRUN useradd --uid 10001 igw\n"
        "COPY --from=build /install /usr/local\n"
    )
    with pytest.raises(image_env.ReplayError, match="is not replayed"):
        replay_check(
            "FROM python:3.11-slim\nCOPY --from=build /install /usr/local\n"
            "RUN pip install requests\n"
        )
    with pytest.raises(image_env.ReplayError, match="must COPY exactly"):
        replay_check("FROM python:3.11-slim\nCOPY --from=build /install /opt/app\n")


def test_only_python_base_images_are_replayed() -> None:
    assert image_env.base_minor("python:3.11-slim") == "3.11"
    assert image_env.base_minor("python:3.12.4-slim-bookworm") == "3.12"
    with pytest.raises(image_env.ReplayError):
        image_env.base_minor("debian:bookworm")


def test_entrypoint_resets_an_inherited_cmd_and_env_reads_both_forms() -> None:
    (stage,) = image_env.stages(
        'FROM python:3.11-slim\nCMD ["python3"]\nENV A=1 B="two words"\nENV LEGACY x y\n'
        'ENTRYPOINT ["igw"]\nUSER 10001\n'
    )
    config = image_env.image_config(stage)
    assert config["Entrypoint"] == ["igw"] and config["Cmd"] is None
    assert config["Env"]["A"] == "1" and config["Env"]["B"] == "two words"
    assert config["Env"]["LEGACY"] == "x y" and config["User"] == "10001"
    with pytest.raises(image_env.ReplayError, match="exec form"):
        image_env.image_config(image_env.stages("FROM python:3.11\nCMD igw --help\n")[0])


def test_the_built_environment_carries_the_shipped_dockerfiles_config() -> None:
    _, final = image_env.stages((ROOT / "gateway_src" / "Dockerfile").read_text())
    built = json.loads((ROOT / ".image" / "image.json").read_text())
    expected = image_env.image_config(final)
    assert {k: built[k] for k in expected} == expected
