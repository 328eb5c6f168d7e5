"""A pod whose KV events never carry the blocks the picker hashes is found out, counted,
logged with its likely cause, and scored from the approximate index; the scorer's
hashing follows its parameters (model tokenizers, LoRA ids, cache salt, hash algo)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
from model_files import picker_scheduler, write_model_files

from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.core.scheduling.kv_index import CHECK_GRACE_S, MISMATCH_RUN
from inference_gateway.core.scheduling.plugins.precise_prefix import PrecisePrefixScorer
from inference_gateway.core.scheduling.registry import build_plugin, validation_context
from inference_gateway.core.scheduling.tokenizer_files import TokenizerSource
from inference_gateway.protocols.vllm.block_hashing import (
    block_hashes,
    hash_function,
    none_hash,
    to_external,
)
from inference_gateway.protocols.vllm.hf_tokenizer import HFTokenizer
from inference_gateway.protocols.vllm.kv_events import (
    BlockStored,
    BlockStoredView,
    KVEventBatch,
    decode_event,
    decode_view,
    encode_batch,
    event_views,
    leading_ints,
)
from inference_gateway.protocols.vllm.prompt_tokens import EmulatorTokenizer

TEXT = "Answer as the support assistant of a large bank, politely. " * 12


def pod() -> Endpoint:
    e = Endpoint("p0", "127.0.0.1", 8000, labels={"igw.dev/gpu": "H100"}, index=0)
    e.metrics, e.stale = PodMetrics(num_gpu_blocks=1000), False
    return e


def body(i: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"{TEXT} question {i}"}]}


def stored_event(ids: list[int], seed: str, algo: str = "sha256", size: int = 16) -> BlockStored:
    """What a pod with these settings publishes for a new prompt of `ids`."""
    hashed = block_hashes(ids, none_hash(seed, algo), block_size=size, hash_fn=hash_function(algo))
    ext = [to_external(h) for h in hashed]
    return BlockStored(ext, None, ids[: len(ext) * size], size, None, "GPU")


def serve(
    scheduler: Scheduler,
    endpoint: Endpoint,
    clock: list[float],
    n: int,
    publish: Any,
    *,
    live: bool = False,
) -> None:
    """`n` requests picked, prefilled by the pod (which publishes `publish(ids)`), and
    answered; the clock then passes the check's grace. `live`: each batch is read as
    the picker's subscriber reads it (`decode_view`: token ids left undecoded)."""
    assert scheduler.precise is not None
    index = scheduler.kv_index
    index.heard(endpoint.name)  # subscribed and alive (before it, nothing is hashed)
    for i in range(n):
        request = LLMRequest(str(i), "m", prompt_tokens=200, prompt_body=body(i))
        scheduler.schedule(request, [endpoint])
        scheduler.on_picked(request, endpoint, clock[0])
        clock[0] += 0.01
        ids = EmulatorTokenizer().prompt_ids(body(i)) or []
        batch = KVEventBatch(ts=0.0, events=[publish(ids)])
        if live:
            for _ in index.ingest_view(endpoint.name, decode_view(encode_batch(batch))):
                pass
        else:
            index.ingest(endpoint.name, batch)
        scheduler.on_first_token(request, endpoint, 0.05, clock[0])
        scheduler.on_finished(request, endpoint, clock[0])
        clock[0] += CHECK_GRACE_S + 0.01  # the next batch settles this request's check
    index.settle()


def fake_clock(scheduler: Scheduler) -> list[float]:
    clock = [100.0]
    scheduler.kv_index.clock = lambda: clock[0]
    return clock


def test_a_pod_hashing_like_the_picker_matches() -> None:
    scheduler = picker_scheduler({})
    clock, endpoint = fake_clock(scheduler), pod()
    serve(scheduler, endpoint, clock, 10, lambda ids: stored_event(ids, "0"))
    assert scheduler.kv_index.match_counts() == {"p0": (10, 0)}
    assert scheduler.kv_index.fresh("p0")


@pytest.mark.parametrize("live", [False, True], ids=["decoded", "live"])
@pytest.mark.parametrize(
    ("publish", "cause"),
    [
        (lambda ids: stored_event(ids, "1234"), "hashAlgo or hashSeed"),
        (lambda ids: stored_event(ids, "0", "sha256_cbor"), "hashAlgo or hashSeed"),
        (lambda ids: stored_event([i + 1 for i in ids], "0"), "tokenizer files or chat template"),
        (lambda ids: stored_event(ids, "0", size=32), "blocks of 32 tokens"),
    ],
)
def test_a_pod_whose_events_never_match_is_counted_logged_and_scored_as_stale(
    publish: Any, cause: str, live: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Another seed, hash algorithm, tokenizer or block size on the pod: every check
    misses; after MISMATCH_RUN misses the warning names the pod and the cause, and
    the pod is scored from the approximate index (a fallback, counted). The same from
    batches read lazily, as the live subscriber reads them (the sample's token ids read
    from the undecoded array)."""
    scheduler = picker_scheduler({})
    clock, endpoint = fake_clock(scheduler), pod()
    with caplog.at_level(logging.WARNING, "inference_gateway.core.scheduling.kv_index"):
        serve(scheduler, endpoint, clock, MISMATCH_RUN + 2, publish, live=live)
    index = scheduler.kv_index
    assert index.match_counts() == {"p0": (0, MISMATCH_RUN + 2)}
    assert not index.fresh("p0") and not index.matching("p0")
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "pod p0" in warnings[0] and cause in warnings[0]
    assert "hashSeed '0'" in warnings[0]  # the scorer's own parameters, for comparison
    before = index.fallbacks
    request = LLMRequest("x", "m", prompt_tokens=200, prompt_body=body(0))
    scheduler.schedule(request, [endpoint])
    assert index.fallbacks == before + 1


def test_a_sample_reads_one_blocks_token_ids_from_an_undecoded_array() -> None:
    """`leading_ints` reads what the diagnosis needs and no more: every msgpack int
    width; fewer ints than asked, or another value first, is None (no sample)."""
    ids = [0, 127, 128, 255, 256, 65_535, 65_536, 2**32, 2**63, -1, -33, -(2**40), 7]
    tail = list(range(70_000))  # with it, an array-32 header
    for values in (ids, ids + tail, [*ids[:3], "x"]):
        event = BlockStored([1], None, values, 16, None, None)  # (encoded unchecked)
        payload = encode_batch(KVEventBatch(0.0, [event]))
        (view,) = [decode_event(raw) for raw in event_views(decode_view(payload))]
        assert isinstance(view, BlockStoredView)
        if values[3] == "x":
            assert leading_ints(view.token_ids, 4) is None
            continue
        assert leading_ints(view.token_ids, len(ids)) == ids
        assert leading_ints(view.token_ids, 0) == []
        assert leading_ints(view.token_ids, len(values) + 1) is None
    assert leading_ints([1, 2, 3], 2) == [1, 2] and leading_ints([1], 2) is None


def test_a_match_clears_the_mark_and_a_silent_pod_is_not_judged() -> None:
    scheduler = picker_scheduler({})
    clock, endpoint = fake_clock(scheduler), pod()
    serve(scheduler, endpoint, clock, MISMATCH_RUN, lambda ids: stored_event(ids, "9"))
    assert not scheduler.kv_index.matching("p0")
    serve(scheduler, endpoint, clock, 1, lambda ids: stored_event(ids, "0"))
    assert scheduler.kv_index.matching("p0") and scheduler.kv_index.fresh("p0")
    # a pod that published nothing after the pick: no verdict either way
    counts = scheduler.kv_index.match_counts()
    unseen = {"messages": [{"role": "user", "content": "Z" * 400}]}
    request = LLMRequest("s", "m", prompt_tokens=200, prompt_body=unseen)
    scheduler.schedule(request, [endpoint])
    scheduler.on_picked(request, endpoint, clock[0])
    clock[0] += 0.01
    scheduler.on_first_token(request, endpoint, 0.05, clock[0])
    scheduler.on_finished(request, endpoint, clock[0])
    clock[0] += CHECK_GRACE_S + 1
    assert scheduler.kv_index.match_counts() == counts


def test_an_event_still_on_its_way_at_the_finish_is_waited_for() -> None:
    """The block is not in the pod's events when the request finishes (its batch is
    still in flight): the check waits `CHECK_GRACE_S` for it."""
    scheduler = picker_scheduler({})
    clock, endpoint = fake_clock(scheduler), pod()
    index = scheduler.kv_index
    index.heard("p0")
    request = LLMRequest("late", "m", prompt_tokens=200, prompt_body=body(1))
    scheduler.schedule(request, [endpoint])
    scheduler.on_picked(request, endpoint, clock[0])
    scheduler.on_first_token(request, endpoint, 0.05, clock[0])
    scheduler.on_finished(request, endpoint, clock[0])
    assert index.match_counts() == {"p0": (0, 0)}  # pending
    ids = EmulatorTokenizer().prompt_ids(body(1)) or []
    clock[0] += 0.5
    index.ingest("p0", KVEventBatch(ts=0.0, events=[stored_event(ids, "0")]))
    clock[0] += CHECK_GRACE_S
    assert index.match_counts() == {"p0": (1, 0)}


def test_models_tokenizers_lora_ids_salt_and_algo_follow_the_parameters(tmp_path: Path) -> None:
    model = write_model_files(tmp_path / "llama")
    params = {
        "hashAlgo": "sha256_cbor",
        "hashSeed": "7",
        "tokenizer": "none",
        "models": {
            "llama": {"tokenizer": str(model)},
            "sql-lora": {"tokenizer": str(model), "loraId": 2},
        },
    }
    scorer = build_plugin("precise-prefix-cache-scorer", "p", params, validation_context())
    assert isinstance(scorer, PrecisePrefixScorer)
    chat = {"messages": [{"role": "user", "content": TEXT}], "cache_salt": "tenant-a"}
    ids = HFTokenizer(model).prompt_ids(chat)
    assert ids is not None and len(ids) >= 32
    fn, root = hash_function("sha256_cbor"), none_hash("7", "sha256_cbor")

    def want(lora_id: int | None, salt: str | None) -> list[int]:
        hashed = block_hashes(ids, root, lora_id=lora_id, cache_salt=salt, hash_fn=fn)
        return [to_external(h) for h in hashed]

    base = LLMRequest("1", "llama", prompt_tokens=100, prompt_body=chat)
    adapter = LLMRequest("2", "sql-lora", prompt_tokens=100, prompt_body=chat, adapter="sql-lora")
    other = LLMRequest("3", "qwen", prompt_tokens=100, prompt_body=chat)  # tokenizer: none
    assert scorer.request_hashes(base) == want(None, "tenant-a")
    assert scorer.request_hashes(adapter) == want(2, "tenant-a")
    assert scorer.request_hashes(other) == []
    unsalted = LLMRequest("4", "llama", prompt_tokens=100, prompt_body={**chat, "cache_salt": ""})
    assert scorer.request_hashes(unsalted) == want(None, None)


def test_a_tokenizer_directory_is_waited_for_then_loaded(tmp_path: Path) -> None:
    """Files that arrive after the picker started (the fetch sidecar) are picked up on
    a thread; until then there is no tokenizer (the approximate index)."""
    now = [0.0]
    source = TokenizerSource(str(tmp_path / "llama"), poll_s=5.0, clock=lambda: now[0])
    assert source.get() is None and not source.ready
    write_model_files(tmp_path / "llama")
    assert source.get() is None  # looked at t=0; the next look is at t=5
    now[0] = 6.0
    for _ in range(200):  # the load runs on a thread: wait for it, bounded
        if source.get() is not None:
            break
        time.sleep(0.01)
    assert source.ready and isinstance(source.get(), HFTokenizer)
    with pytest.raises(ValueError, match="tokenizer"):  # present but broken: a config error
        (tmp_path / "broken").mkdir()
        (tmp_path / "broken" / "tokenizer.json").write_text("{")
        TokenizerSource(str(tmp_path / "broken"))
