"""`precise-prefix-cache-scorer`: real cached lengths from events, affinity, fallback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.core.scheduling.plugins.precise_prefix import PrecisePrefixScorer
from inference_gateway.core.scheduling.registry import build_plugin, validation_context
from inference_gateway.protocols.vllm.block_hashing import block_hashes, none_hash, to_external
from inference_gateway.protocols.vllm.hf_tokenizer import HFTokenizer
from inference_gateway.protocols.vllm.prompt_tokens import EmulatorTokenizer, render_chat, text_ids


def pods(n: int) -> list[Endpoint]:
    out = []
    for i in range(n):
        e = Endpoint(f"p{i}", "127.0.0.1", 8000 + i, labels={"igw.dev/gpu": "H100"}, index=i)
        e.metrics, e.stale = PodMetrics(num_gpu_blocks=1000), False
        out.append(e)
    return out


def request(i: int, hashes: tuple[int, ...], tokens: int = 0) -> LLMRequest:
    tokens = tokens or 16 * len(hashes) + 8
    return LLMRequest(str(i), "m", prompt_tokens=tokens, prefix_hashes=hashes, kv_hashes=hashes)


def test_cost_comes_from_what_pods_hold_affinity_also_from_where_it_was_sent() -> None:
    scheduler = Scheduler(GatewayConfigSpec(), seed=1)
    assert scheduler.precise is not None
    kv, fleet = scheduler.kv_index, pods(2)
    for e in fleet:
        kv.heard(e.name)
    context = tuple(range(100, 200))
    first = request(1, context)
    chosen = scheduler.schedule(first, fleet)[0]
    scheduler.on_picked(first, chosen, 0.0)
    # before the pod reports anything, its pending request counts as held there
    second = request(2, context)
    scheduler.schedule(second, fleet)
    assert second.prefix_matches == {chosen.name: 100}
    scheduler.on_first_token(first, chosen, 0.1, 0.1)
    scheduler.on_finished(first, chosen, 0.2)
    kv.stored(chosen.name, context[:60])  # the pod kept 60 of its 100 blocks
    third = request(3, context)
    scheduler.schedule(third, fleet)
    assert third.prefix_matches == {chosen.name: 60}  # the predictor sees 60, not 100
    scores = scheduler.precise.score(third, fleet)
    assert scores[chosen.index] == pytest.approx(100 / 100)  # the home pod keeps affinity
    assert scores[1 - chosen.index] == 0.0


def test_a_stale_pod_falls_back_to_the_approximate_index_and_is_counted() -> None:
    scheduler = Scheduler(GatewayConfigSpec(), seed=1)
    kv, fleet = scheduler.kv_index, pods(2)
    kv.stale_after_s = 1.0
    clock = [0.0]
    kv.clock = lambda: clock[0]
    kv.heard("p0"), kv.heard("p1")
    ids = tuple(range(10))
    scheduler.index.add("p1", ids)  # the picker sent these to p1 earlier
    kv.expect("p1")  # and p1 never reported them
    clock[0] = 5.0
    req = request(1, ids)
    scheduler.schedule(req, fleet)
    assert req.prefix_matches == {"p1": 10} and kv.fallbacks == 1


def test_hashes_of_a_chat_body_are_vllms_over_the_emulators_token_ids() -> None:
    params = {"models": {"sql": {"tokenizer": "emulator", "loraId": 1}}}
    scorer = build_plugin("precise-prefix-cache-scorer", "p", params, validation_context())
    assert isinstance(scorer, PrecisePrefixScorer)
    body = {"messages": [{"role": "user", "content": "x" * 300}]}
    req = LLMRequest("r", "m", prompt_tokens=80, prompt_body=body)
    ids = text_ids(render_chat(body["messages"]))
    want = [to_external(h) for h in block_hashes(ids, none_hash("0"))]
    assert scorer.request_hashes(req) == want and len(want) == len(ids) // 16
    adapter = LLMRequest("r", "sql", prompt_tokens=80, prompt_body=body, adapter="sql")
    with_id = [to_external(h) for h in block_hashes(ids, none_hash("0"), lora_id=1)]
    assert scorer.request_hashes(adapter) == with_id != want  # its int id in every key
    # an adapter whose vLLM id the scorer is not told gets no hashes, not wrong ones
    unknown = LLMRequest("r", "other", prompt_tokens=80, prompt_body=body, adapter="other")
    assert scorer.request_hashes(unknown) == []
    assert EmulatorTokenizer().prompt_ids({"messages": "nope"}) is None


def test_a_models_own_tokenizer_files_are_read_from_a_directory(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "<s>": 1, "hello": 2, "world": 3, "<|user|>": 4, "<|assistant|>": 5}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    template = (
        "{{ bos_token }} {% for m in messages %}<|{{ m.role }}|> {{ m.content }} {% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": template, "bos_token": "<s>"})
    )
    hf = HFTokenizer(tmp_path)
    body = {"messages": [{"role": "user", "content": "hello world"}]}
    assert hf.prompt_ids(body) == [1, 4, 2, 3, 5]  # "<s> <|user|> hello world <|assistant|>"
    assert hf.prompt_ids({"prompt": "hello hello"}) == [2, 2]
    with pytest.raises(ValueError, match="tokenizer"):
        HFTokenizer(tmp_path / "missing")
