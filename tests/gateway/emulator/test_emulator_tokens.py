"""The tokenization rule, the chat template and the filler output are deterministic."""

from __future__ import annotations

import pytest

from inference_gateway.emulator import tokens
from inference_gateway.protocols.vllm.block_hashing import block_hashes, none_hash
from inference_gateway.protocols.vllm.prompt_tokens import EmulatorTokenizer, text_ids


@pytest.mark.parametrize(
    ("text", "expected"), [("", 1), ("abc", 1), ("abcd", 1), ("abcde", 2), ("é" * 4, 2)]
)
def test_four_bytes_per_token(text: str, expected: int) -> None:
    assert tokens.count_tokens(text) == expected


def test_token_ids_follow_the_counting_rule_and_the_pickers_tokenizer() -> None:
    text = "You are a helpful assistant. " * 30
    ids = text_ids(text)
    assert len(ids) == tokens.count_tokens(text)
    assert ids[0] == int.from_bytes(b"You ", "big")
    body = {"messages": [{"role": "user", "content": text}]}
    assert EmulatorTokenizer().prompt_ids(body) == text_ids(tokens.render_chat(body["messages"]))


def hashes(text: str, lora_id: int | None = None) -> list[bytes]:
    return block_hashes(text_ids(text), none_hash("0"), lora_id=lora_id)


def test_chat_template_keeps_a_shared_system_prompt_a_shared_prefix() -> None:
    system = {"role": "system", "content": "S" * 640}
    a = tokens.render_chat([system, {"role": "user", "content": "first"}])
    b = tokens.render_chat(
        [system, {"role": "user", "content": [{"type": "text", "text": "second"}]}]
    )
    assert a.startswith("<|system|>\n" + "S" * 640 + "\n<|user|>\n")
    assert a.endswith("<|assistant|>\n") and "second" in b
    ha, hb = hashes(a), hashes(b)
    assert ha[:10] == hb[:10]
    assert hashes(a, 1)[0] != ha[0]  # adapters never share blocks
    with pytest.raises(ValueError):
        tokens.render_chat([{"content": "no role"}])


def test_filler_is_deterministic_and_one_token_per_word() -> None:
    seed = tokens.prompt_seed("hello")
    text = tokens.filler_text(seed, 0, 50)
    assert text == tokens.filler_text(seed, 0, 50)
    assert tokens.count_tokens(text) == 50 and len(text.split()) == 50
    assert tokens.filler_text(seed, 0, 20) + tokens.filler_text(seed, 20, 50) == text
    lengths = {tokens.default_output_tokens(tokens.prompt_seed(str(i))) for i in range(2000)}
    assert min(lengths) >= 16 and max(lengths) <= 256 and len(lengths) > 200
