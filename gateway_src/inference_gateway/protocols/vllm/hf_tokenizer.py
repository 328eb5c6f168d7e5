"""A model's own token ids for a request, as vLLM v0.11.0 computes them from the body.

The `precise-prefix-cache-scorer` must hash the ids the pod will hash, so this follows
what the pinned server does, step by step, where it changes the ids (sources:
vllm-project/vllm v0.11.0 `vllm/entrypoints/openai/serving_chat.py`,
`serving_engine.py` `_preprocess_chat`, `vllm/entrypoints/chat_utils.py`; transformers
4.56 `tokenization_utils_base.py` `apply_chat_template` / `get_chat_template` and
`utils/chat_template_utils.py` `_compile_jinja_template` / `render_jinja_template`):

* **Files**, from a local directory only (never a hub): `tokenizer.json` (the fast
  tokenizer, through the `tokenizers` library), `tokenizer_config.json` (special tokens,
  `chat_template` as a string or a list of named templates), `special_tokens_map.json`
  for special tokens the config leaves out, and `chat_template.jinja` /
  `additional_chat_templates/*.jinja`, which replace the config's templates when present.
* **Template choice**: a named set picks `tool_use` when the request has `tools`, else
  `default`; a request's own `chat_template` is not reproduced (no ids: approximate).
* **Messages** (`_parse_chat_message_content`): each becomes `{role, content}`, plus
  `tool_calls` (assistant), `tool_call_id` (tool) and a string `name`; text parts
  (`text`, `input_text`, `refusal`, `thinking`) are joined with "\\n" into a string when
  the template's content format is "string", or kept as `{"type": "text", "text"}`
  parts for "openai", the format vLLM detects from the template's AST exactly as
  `_detect_content_format` does (a loop over a message's `content`); tool-call
  `arguments` are parsed from JSON (`_postprocess_messages`). Media parts: no ids (the
  engine's multimodal hashes and placeholder tokens are not reproduced).
* **Rendering** (`_compile_jinja_template`): a sandboxed Jinja environment with
  `trim_blocks`, `lstrip_blocks`, loop controls and the `{% generation %}` tag,
  transformers' `tojson` (no HTML escaping, `indent` and friends), `raise_exception` and
  `strftime_now`; variables: the special tokens, `messages`, `tools` (the tool objects as
  vLLM's pydantic models dump them: declared fields first, `None` included, then extras),
  `documents`, `add_generation_prompt` (default true) and the `chat_template_kwargs`
  the template declares (`resolve_chat_template_kwargs`); `continue_final_message` cuts
  the text after the final message as transformers does.
* **Tokenizing**: a chat's text without special tokens unless the body asks
  (`add_special_tokens`, default false: the template writes them), a completion's prompt
  with them (default true); a prompt of token ids is used as it is. A body with
  `truncate_prompt_tokens` or `prompt_embeds` gets no ids.

Whatever this cannot reproduce gives `None` (the scorer then uses its approximate index
for that request), never a guess: a wrong guess would hash blocks no pod holds.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
import jinja2.parser
import jinja2.runtime
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["HFTokenizer", "content_format"]

#: transformers' SPECIAL_TOKENS_ATTRIBUTES: what `special_tokens_map` hands the template.
SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
    "additional_special_tokens",
)
#: vLLM's MM_PARSER_MAP entries that carry text: part type → the key holding it.
TEXT_PARTS = {"text": "text", "input_text": "text", "thinking": "thinking", "refusal": "refusal"}
#: `apply_chat_template` parameters a request could set through `chat_template_kwargs`
#: that change more than the template's text (or the template itself): no ids then.
NOT_REPRODUCED_KWARGS = frozenset(
    {
        "chat_template",
        "tools",
        "conversation",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)
#: `apply_chat_template`'s named parameters vLLM passes through (kept even when the
#: template does not name them): the rest of a request's kwargs must be template variables.
NAMED_KWARGS = frozenset({"documents", "add_generation_prompt", "continue_final_message"})


class _Unsupported(Exception):
    """The request asks for something this module does not reproduce."""


# ---------------------------------------------------------------- the Jinja environment


class _GenerationTag(jinja2.ext.Extension):
    """transformers' `{% generation %}` block (AssistantTracker), rendering its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_generation_support")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _generation_support(self, caller: jinja2.runtime.Macro) -> str:
        return str(caller())


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _environment()


@lru_cache(maxsize=16)
def _compiled(template: str) -> tuple[jinja2.Template, frozenset[str], str]:
    """The template compiled, the variables it reads, and its content format."""
    ast = _ENV.parse(template)
    return (
        _ENV.from_string(template),
        frozenset(jinja2.meta.find_undeclared_variables(ast)),
        (content_format(ast)),
    )


# ------------------------------------------------ vLLM's content-format detection (AST)


def _is_var_access(node: jinja2.nodes.Node, varname: str) -> bool:
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == varname


def _is_attr_access(node: jinja2.nodes.Node, varname: str, key: str) -> bool:
    if isinstance(node, jinja2.nodes.Getitem):
        return (
            _is_var_access(node.node, varname)
            and isinstance(node.arg, jinja2.nodes.Const)
            and node.arg.value == key
        )
    if isinstance(node, jinja2.nodes.Getattr):
        return _is_var_access(node.node, varname) and node.attr == key
    return False


def _is_var_or_elems_access(node: jinja2.nodes.Node, varname: str, key: str | None = None) -> bool:
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Test):
        return _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _is_var_or_elems_access(node.node, varname, key)
    return _is_attr_access(node, varname, key) if key else _is_var_access(node, varname)


def _names_assigned_from(root: jinja2.nodes.Template, varname: str) -> Iterator[str]:
    yield varname
    related, seen = deque([varname]), {varname}
    while related:  # (vLLM's loop never ends on `a = b` / `b = a`: `seen` ends it)
        name = related.popleft()
        for assign in root.find_all(jinja2.nodes.Assign):
            if _is_var_or_elems_access(assign.node, name):
                if not isinstance(assign.target, jinja2.nodes.Name):
                    raise _Unsupported  # vLLM asserts here, and so detects "string"
                yield assign.target.name
                if assign.target.name not in seen:
                    seen.add(assign.target.name)
                    related.append(assign.target.name)


def _loop_targets(
    root: jinja2.nodes.Template, iterables: list[str], key: str | None
) -> Iterator[str]:
    for loop in root.find_all(jinja2.nodes.For):
        for varname in iterables:
            if _is_var_or_elems_access(loop.iter, varname, key):
                if not isinstance(loop.target, jinja2.nodes.Name):
                    raise _Unsupported  # vLLM asserts here, and so detects "string"
                yield loop.target.name
                break


def content_format(root: jinja2.nodes.Template) -> str:
    """vLLM's `_detect_content_format`: "openai" when the template loops over a
    message's `content` (a message being a loop variable over `messages` or a name
    assigned from it), else "string"."""
    try:
        messages = list(_names_assigned_from(root, "messages"))
        message_vars = list(_loop_targets(root, messages, None))
        found = next(_loop_targets(root, message_vars, "content"), None)
    except _Unsupported:
        return "string"
    return "openai" if found is not None else "string"


# -------------------------------------------------------------------- the request body


def _text_parts(content: Any) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        raise _Unsupported
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, Mapping) or part.get("uuid") is not None:
            raise _Unsupported
        key = TEXT_PARTS.get(part.get("type"))  # type: ignore[arg-type]
        if key is None:  # media, or a part vLLM rejects
            raise _Unsupported
        text = part.get(key)
        if text is None:  # vLLM skips a text part without text
            continue
        if not isinstance(text, str):
            raise _Unsupported
        texts.append(text)
    return texts


def _tool_call(item: Any) -> dict[str, Any]:
    """A tool call as vLLM hands it to the template: arguments parsed from JSON."""
    if not isinstance(item, Mapping) or not isinstance(item.get("function"), Mapping):
        raise _Unsupported
    function = dict(item["function"])
    arguments = function.get("arguments")
    try:
        function["arguments"] = json.loads(arguments) if arguments else {}
    except (TypeError, ValueError):
        raise _Unsupported from None
    return {**item, "function": function}


def conversation(messages: Sequence[Any], fmt: str) -> list[dict[str, Any]]:
    """vLLM's `parse_chat_messages` for text-only messages."""
    out = []
    for message in messages:
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise _Unsupported
        role = message["role"]
        texts = _text_parts(message.get("content"))
        content: Any = (
            [{"type": "text", "text": t} for t in texts] if fmt == "openai" else "\n".join(texts)
        )
        result: dict[str, Any] = {"role": role, "content": content}
        if role == "assistant" and message.get("tool_calls") is not None:
            calls = message["tool_calls"]
            if not isinstance(calls, list):
                raise _Unsupported
            result["tool_calls"] = [_tool_call(c) for c in calls]
        elif role == "tool" and "tool_call_id" in message:
            result["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            result["name"] = message["name"]
        out.append(result)
    return out


def _tool_dicts(tools: Any) -> list[dict[str, Any]] | None:
    """`[tool.model_dump() for tool in request.tools]`: ChatCompletionToolsParam
    {type, function: FunctionDefinition {name, description, parameters}}, extras after."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _Unsupported
    out = []
    for tool in tools:
        if not isinstance(tool, Mapping) or not isinstance(tool.get("function"), Mapping):
            raise _Unsupported
        function = tool["function"]
        if not isinstance(function.get("name"), str):
            raise _Unsupported
        fields = {
            "name": function["name"],
            "description": function.get("description"),
            "parameters": function.get("parameters"),
        }
        extras = {k: v for k, v in function.items() if k not in fields}
        rest = {k: v for k, v in tool.items() if k not in ("type", "function")}
        out.append({"type": "function", "function": {**fields, **extras}, **rest})
    return out


def _continue_final(rendered: str, chat: list[dict[str, Any]]) -> str:
    """transformers' `render_jinja_template` for `continue_final_message`."""
    final = chat[-1]["content"] if chat else ""
    if isinstance(final, list):
        texts = [block["text"] for block in final if "text" in block]
        if not texts:
            raise _Unsupported
        final = texts[-1]
    if final.strip() not in rendered:
        raise _Unsupported
    at = rendered.rindex(final.strip())
    if rendered[at : at + len(final.lstrip())] == final:
        return rendered[: at + len(final.lstrip())]
    return rendered[: at + len(final.strip())]


def _flag(body: Mapping[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise _Unsupported
    return value


# ------------------------------------------------------------------------ the tokenizer


def _token_text(value: Any) -> Any:
    """A special token as `special_tokens_map` gives it: its content (AddedToken dicts)."""
    if isinstance(value, Mapping):
        return value.get("content")
    if isinstance(value, list):
        return [_token_text(v) for v in value]
    return value


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path.name} is not a JSON object")
    return data


def _templates(path: Path, config: Mapping[str, Any]) -> dict[str, str]:
    """Named chat templates as transformers loads them (files replace the config's)."""
    files: dict[str, str] = {}
    if (path / "chat_template.jinja").is_file():
        files["default"] = (path / "chat_template.jinja").read_text(encoding="utf-8")
    extra = path / "additional_chat_templates"
    if extra.is_dir():
        for file in sorted(extra.glob("*.jinja")):
            files[file.name.removesuffix(".jinja")] = file.read_text(encoding="utf-8")
    if files:
        return files
    template = config.get("chat_template")
    if isinstance(template, str):
        return {"default": template}
    if isinstance(template, list):
        return {
            t["name"]: t["template"]
            for t in template
            if isinstance(t, Mapping) and isinstance(t.get("name"), str)
            and isinstance(t.get("template"), str)
        }  # fmt: skip
    return {}


class HFTokenizer:
    """A model's own tokenizer files from `directory` (see the module docstring)."""

    def __init__(self, directory: str | Path) -> None:
        from tokenizers import Tokenizer

        path = Path(directory)
        try:
            self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
            config = _read_json(path / "tokenizer_config.json")
            special_map = _read_json(path / "special_tokens_map.json")
            self.templates = _templates(path, config)
        except Exception as error:  # OSError, bad JSON, or the tokenizers library's own
            raise ValueError(f"tokenizer: cannot load {path}: {error}") from None
        self.directory = path
        self.specials: dict[str, Any] = {}
        for key in SPECIAL_TOKENS:
            value = _token_text(config.get(key)) or _token_text(special_map.get(key))
            if value:
                self.specials[key] = value

    def prompt_ids(self, body: Mapping[str, Any]) -> list[int] | None:
        """The ids the pod computes for `body` (None: not reproduced, see the docstring)."""
        try:
            if body.get("truncate_prompt_tokens") is not None or "prompt_embeds" in body:
                return None
            messages = body.get("messages")
            if messages is not None:
                return self._chat_ids(body, messages)
            return self._completion_ids(body)
        except _Unsupported:
            return None
        except Exception:  # a template error or a type a hostile body sneaks in
            return None

    def _completion_ids(self, body: Mapping[str, Any]) -> list[int] | None:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # one prompt of a batch of one
        if (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            return list(prompt)
        if not isinstance(prompt, str):
            return None
        special = _flag(body, "add_special_tokens", True)
        return list(self.tokenizer.encode(prompt, add_special_tokens=special).ids)

    def _chat_ids(self, body: Mapping[str, Any], messages: Any) -> list[int] | None:
        if not isinstance(messages, list) or body.get("chat_template") is not None:
            return None
        tools = _tool_dicts(body.get("tools"))
        template = self._template(tools)
        if template is None:
            return None
        compiled, variables, fmt = _compiled(template)
        chat = conversation(messages, fmt)
        add_generation_prompt = _flag(body, "add_generation_prompt", True)
        continue_final = _flag(body, "continue_final_message", False)
        extra = body.get("chat_template_kwargs") or {}
        if not isinstance(extra, Mapping) or NOT_REPRODUCED_KWARGS & extra.keys():
            return None
        kwargs: dict[str, Any] = {
            "add_generation_prompt": add_generation_prompt,
            "continue_final_message": continue_final,
            "documents": body.get("documents"),
            **extra,
        }
        kwargs = {k: v for k, v in kwargs.items() if k in NAMED_KWARGS or k in variables}
        add_generation_prompt = kwargs.pop("add_generation_prompt")
        continue_final = kwargs.pop("continue_final_message")
        if not isinstance(add_generation_prompt, bool) or not isinstance(continue_final, bool):
            return None
        if add_generation_prompt and continue_final:  # transformers refuses (vLLM: 400)
            return None
        documents = kwargs.pop("documents")
        text = compiled.render(
            messages=chat,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            **{**self.specials, **kwargs},
        )
        if continue_final:
            text = _continue_final(text, chat)
        special = _flag(body, "add_special_tokens", False)
        return list(self.tokenizer.encode(text, add_special_tokens=special).ids)

    def _template(self, tools: list[dict[str, Any]] | None) -> str | None:
        """transformers' `get_chat_template(None, tools)`."""
        templates = self.templates
        if tools is not None and "tool_use" in templates:
            return templates["tool_use"]
        return templates.get("default")
