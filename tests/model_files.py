"""A small but real model tokenizer, built by the tests (never fetched from a hub).

`write_model_files(dir)` trains a byte-level BPE with the `tokenizers` library on a few
lines of text, adds Llama-3-style special tokens and a post-processor that prepends
`<|begin_of_text|>` (as Meta's `tokenizer.json` does), and writes `tokenizer.json`,
`tokenizer_config.json` (special tokens and a chat template in the Llama 3.1 style:
header tokens, `bos_token`, tools as `tojson(indent=4)`, `raise_exception`) as a model
repository has them. The same files serve the picker's tokenizer, the emulator's
`--tokenizer` and the tests' expectations; `picker_scheduler(params)` is a scheduler
whose precise prefix scorer has the given parameters (such as those files' directory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from inference_gateway.config.spec import GatewayConfigSpec, PluginSpec
from inference_gateway.core.scheduling import Scheduler

__all__ = ["BOS", "CHAT_TEMPLATE", "picker_scheduler", "write_model_files"]

BOS = "<|begin_of_text|>"
SPECIALS = [BOS, "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|python_tag|>"]
CORPUS = [
    "You are a helpful assistant who answers questions about the weather and banking.",
    "The user asked about accounts, transfers, cards, loans and the weather in Paris.",
    "Environment: ipython. Tools: get_weather(city), open_account(name). Answer briefly.",
    '{"type": "function", "function": {"name": "get_weather", "parameters": {}}}',
] * 4
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if tools is not none %}"
    "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
    "{%- for t in tools %}\n{{ t | tojson(indent=4) }}{% endfor %}<|eot_id|>"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{- raise_exception('unknown role ' + message.role) }}"
    "{%- endif %}"
    "<|start_header_id|>{{ message.role }}<|end_header_id|>{{ '\\n\\n' }}"
    "{%- if message.tool_calls %}"
    "{%- for call in message.tool_calls %}"
    '{"name": "{{ call.function.name }}", "parameters": {{ call.function.arguments | tojson }}}'
    "{%- endfor %}"
    "{%- else %}{{ message.content | trim }}{%- endif %}<|eot_id|>"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def write_model_files(directory: Path, *, chat_template: str = CHAT_TEMPLATE) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    bos = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos)]
    )
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "bos_token": BOS,
        "eos_token": "<|eot_id|>",
        "chat_template": chat_template,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def picker_scheduler(params: dict[str, Any]) -> Scheduler:
    """The shipped config's scheduler, its `precise-prefix-cache-scorer` given `params`."""
    config = GatewayConfigSpec().model_copy(deep=True)
    for i, plugin in enumerate(config.plugins):
        if plugin.type == "precise-prefix-cache-scorer":
            config.plugins[i] = PluginSpec(type=plugin.type, parameters=params)
    return Scheduler(config, seed=1)
