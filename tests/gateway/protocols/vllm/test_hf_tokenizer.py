"""A model's own token ids for a request, as vLLM v0.11.0 and transformers 4.56 get them.

Each expectation is the text the pinned server renders, written out here by hand from
the rules its source states (vllm-project/vllm v0.11.0 `vllm/entrypoints/chat_utils.py`
and `openai/serving_engine.py` `_preprocess_chat`; transformers 4.56
`tokenization_utils_base.py` `apply_chat_template` / `get_chat_template`,
`utils/chat_template_utils.py` `_compile_jinja_template` / `render_jinja_template`),
then tokenized with the model's own tokenizer: the ids must be the ids of that text.
The tokenizer is built by the tests (`model_files`), never fetched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from model_files import BOS, write_model_files

from inference_gateway.protocols.vllm.hf_tokenizer import _ENV, HFTokenizer, content_format

SYSTEM = "You are a helpful assistant."
HEAD = "<|start_header_id|>{}<|end_header_id|>\n\n"
END = "<|eot_id|>"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_files(tmp_path_factory.mktemp("model"))


def ids(model: Path, text: str, special: bool = False) -> list[int]:
    return HFTokenizer(model).tokenizer.encode(text, add_special_tokens=special).ids


def turn(role: str, content: str) -> str:
    return HEAD.format(role) + content + END


def test_a_chat_is_the_templates_text_without_added_special_tokens(model: Path) -> None:
    """`add_generation_prompt` defaults to true and `add_special_tokens` to false for
    chat (the template writes `bos_token`, from tokenizer_config.json)."""
    hf = HFTokenizer(model)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": " hi there "}]
    want = BOS + turn("system", SYSTEM) + turn("user", "hi there") + HEAD.format("assistant")
    assert hf.prompt_ids({"messages": messages}) == ids(model, want)
    assert ids(model, want)[0] == hf.tokenizer.token_to_id(BOS)
    # asked for, special tokens are added on top: the post-processor's BOS twice
    twice = hf.prompt_ids({"messages": messages, "add_special_tokens": True})
    assert twice == ids(model, want, special=True) and twice[:2] == [twice[0]] * 2
    without = {"messages": messages, "add_generation_prompt": False}
    assert hf.prompt_ids(without) == ids(
        model, BOS + turn("system", SYSTEM) + turn("user", "hi there")
    )


def test_a_completion_prompt_gets_special_tokens_and_token_ids_pass_as_they_are(
    model: Path,
) -> None:
    hf = HFTokenizer(model)
    assert hf.prompt_ids({"prompt": "the weather"}) == ids(model, "the weather", special=True)
    assert hf.prompt_ids({"prompt": ["the weather"], "add_special_tokens": False}) == ids(
        model, "the weather"
    )
    assert hf.prompt_ids({"prompt": [5, 6, 7]}) == [5, 6, 7]
    assert hf.prompt_ids({"prompt": [[5, 6, 7]]}) == [5, 6, 7]
    assert hf.prompt_ids({"prompt": [True, 2]}) is None


def test_text_parts_are_joined_with_newlines_for_a_string_template(model: Path) -> None:
    """`_parse_chat_message_content_parts`: texts "\\n".join-ed for "string" templates;
    a part without text is skipped; `input_text`, `refusal` and `thinking` are text."""
    hf = HFTokenizer(model)
    parts = [
        {"type": "text", "text": "first"},
        {"type": "text", "text": None},
        {"type": "input_text", "text": "second"},
        {"type": "refusal", "refusal": "third"},
    ]
    body = {"messages": [{"role": "user", "content": parts}]}
    want = BOS + turn("user", "first\nsecond\nthird") + HEAD.format("assistant")
    assert hf.prompt_ids(body) == ids(model, want)


def test_an_openai_format_template_gets_the_parts(tmp_path: Path) -> None:
    """A template that loops over a message's content gets `{"type": "text", "text"}`
    parts (a string content becomes one part), as vLLM detects and builds them."""
    template = (
        "{% for m in messages %}[{{ m.role }}]{% for p in m['content'] %}"
        "({{ p.type }}:{{ p.text }}){% endfor %}{% endfor %}"
    )
    model = write_model_files(tmp_path / "m", chat_template=template)
    hf = HFTokenizer(model)
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, "b"]},
                         {"role": "assistant", "content": "c"}]}  # fmt: skip
    assert hf.prompt_ids(body) == ids(model, "[user](text:a)(text:b)[assistant](text:c)")


@pytest.mark.parametrize(
    ("template", "fmt"),
    [
        ("{% for m in messages %}{{ m['content'] }}{% endfor %}", "string"),
        ("{% for m in messages %}{% for c in m['content'] %}{{ c }}{% endfor %}{% endfor %}",
         "openai"),
        ("{% set msgs = messages[1:] %}{% for m in msgs %}{% for c in m.content %}"
         "{% endfor %}{% endfor %}", "openai"),
        ("{% for m in messages | reverse %}{% for c in m.content | list %}{% endfor %}"
         "{% endfor %}", "openai"),
        ("{% for c in messages[0]['content'] %}{{ c }}{% endfor %}", "string"),
        ("{% for m in other %}{% for c in m.content %}{% endfor %}{% endfor %}", "string"),
        ("{% for m, n in messages %}{% for c in m.content %}{% endfor %}{% endfor %}", "string"),
    ],
)  # fmt: skip
def test_content_format_is_detected_from_the_template_as_vllm_does(template: str, fmt: str) -> None:
    """`_detect_content_format`: a `for` over the `content` of a loop variable over
    `messages` (or a name assigned from it, through filters, tests and slices) means
    "openai"; an AST vLLM's walk asserts on means its default, "string"."""
    assert content_format(_ENV.parse(template)) == fmt


def test_tools_and_tool_calls_reach_the_template_as_vllm_builds_them(model: Path) -> None:
    """Tools are vLLM's pydantic dump (declared fields first, `None` kept, extras last);
    transformers' `tojson` keeps `<` and non-ASCII as they are; a tool call's
    `arguments` string is parsed to a dict (`_postprocess_messages`)."""
    hf = HFTokenizer(model)
    tool = {"type": "function", "function": {"strict": True, "name": "get_weather",
                                             "description": "<b>é</b>"}}  # fmt: skip
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
    body = {
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
        ],
        "tools": [tool],
    }
    dumped = {"type": "function", "function": {"name": "get_weather",
              "description": "<b>é</b>", "parameters": None, "strict": True}}  # fmt: skip
    want = (
        BOS
        + HEAD.format("system")
        + "Environment: ipython"  # trim_blocks eats the newline after `{% for %}`
        + json.dumps(dumped, ensure_ascii=False, indent=4)
        + END
        + turn("user", "weather?")
        + turn("assistant", '{"name": "get_weather", "parameters": {"city": "Paris"}}')
        + turn("tool", "sunny")
        + HEAD.format("assistant")
    )
    assert hf.prompt_ids(body) == ids(model, want)


def test_template_files_and_named_templates_are_chosen_as_transformers_does(
    tmp_path: Path,
) -> None:
    """`chat_template.jinja` replaces the config's template; of named templates,
    `tool_use` serves a request with tools and `default` the others."""
    model = write_model_files(tmp_path / "m")
    (model / "chat_template.jinja").write_text(
        "FILE{% for m in messages %}{{ m.content }}{% endfor %}"
    )
    assert HFTokenizer(model).prompt_ids({"messages": [{"role": "user", "content": "x"}]}) == (
        ids(model, "FILEx")
    )
    (model / "chat_template.jinja").unlink()
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = [
        {"name": "default", "template": "D{{ messages[0].content }}"},
        {"name": "tool_use", "template": "T{{ messages[0].content }}"},
    ]
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    hf = HFTokenizer(model)
    plain = {"messages": [{"role": "user", "content": "x"}]}
    tools = {**plain, "tools": [{"type": "function", "function": {"name": "f"}}]}
    assert hf.prompt_ids(plain) == ids(model, "Dx")
    assert hf.prompt_ids(tools) == ids(model, "Tx")


def test_continue_final_message_cuts_after_the_final_message(model: Path) -> None:
    """transformers' `render_jinja_template`: the text ends where the final message
    does (the resume of a broken stream sends such requests, DESIGN §7)."""
    hf = HFTokenizer(model)
    body = {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Par"}],
        "add_generation_prompt": False,
        "continue_final_message": True,
    }
    assert hf.prompt_ids(body) == ids(
        model, BOS + turn("user", "hi") + HEAD.format("assistant") + "Par"
    )
    assert hf.prompt_ids({**body, "add_generation_prompt": True}) is None  # refused upstream


def test_chat_template_kwargs_reach_the_template_only_when_it_reads_them(
    tmp_path: Path,
) -> None:
    """`resolve_chat_template_kwargs`: a request's kwargs pass when the template names
    them (or `apply_chat_template` does); the rest are dropped."""
    template = "{{ greeting | default('none') }}:{{ messages[0].content }}{{ bos_token }}"
    model = write_model_files(tmp_path / "m", chat_template=template)
    hf = HFTokenizer(model)
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "x"}]}
    assert hf.prompt_ids(body) == ids(model, "none:x" + BOS)
    kwargs = {"greeting": "hello", "unused": 1}
    assert hf.prompt_ids({**body, "chat_template_kwargs": kwargs}) == ids(model, "hello:x" + BOS)
    assert hf.prompt_ids({**body, "chat_template_kwargs": {"tokenize": True}}) is None


def test_transformers_template_environment(tmp_path: Path) -> None:
    """Loop controls, `{% generation %}`, `strftime_now` and `raise_exception` exist
    (`_compile_jinja_template`); blocks trim their newline and leading spaces."""
    template = (
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}\n"
        "  {% generation %}{{ m.content }}{% endgeneration %}\n"
        "{% endfor %}{{ strftime_now('%Y') | length }}"
    )
    model = write_model_files(tmp_path / "m", chat_template=template)
    body = {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
    assert HFTokenizer(model).prompt_ids(body) == ids(model, "a4")


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        {"messages": [{"role": "user", "content": "x"}], "chat_template": "{{ 1 }}"},
        {"messages": [{"role": "user", "content": "x"}], "truncate_prompt_tokens": 10},
        {"messages": [{"role": "wizard", "content": "x"}]},  # the template raises
        {"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{"}}]}]},
        {"messages": "x"},
        {"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": "yes"},
        {"prompt": {"not": "a prompt"}},
        {"prompt": "x", "prompt_embeds": "..."},
    ],
)  # fmt: skip
def test_what_is_not_reproduced_gives_no_ids(model: Path, body: dict[str, Any]) -> None:
    """Media, a request's own template, truncation, a template error, bad JSON arguments,
    malformed fields: no ids (the scorer's approximate index), never a guess."""
    assert HFTokenizer(model).prompt_ids(body) is None


def test_unreadable_files_are_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tokenizer"):
        HFTokenizer(tmp_path / "missing")
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="tokenizer"):
        HFTokenizer(tmp_path)
