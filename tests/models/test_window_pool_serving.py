"""Windowed models served with a window pool, held to transformers (slow: a checkpoint and a
transformers model per architecture; tests/runtime/test_window_pool.py covers the window pool by
default, against the same model without one).

Each parity-suite spec with windowed layers is served through `build_scheduler` (the server's
own sizing, the startup log line) with decode capture and a window pool at its floor: prompts
far longer than the window, two requests sharing a prefix (the second extends the first's cached
prefix where its window slots remain), and every request's greedy tokens equal transformers'.
The window pool is smaller than the full pool and whole again once the cache is flushed."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

from sglang.ci.suites.model_harness import SPECS_BY_NAME, build_checkpoint, hf_greedy
from sglang.runtime.loader import open_model_source
from sglang.runtime.scheduler.process import build_scheduler
from sglang.runtime.server_args import ServerArgs
from tests.runtime.runtime_harness import make_request, model_threads

NEW_TOKENS = 8
CHUNK = 64
"""Each prompt prefills in one chunk, so its cached prefix holds window slots wherever the next
request's match ends (chunks free the tails of earlier ones: tests/runtime/test_window_pool.py)."""
WINDOWED_SPECS = ("gemma2-softcap", "gemma3-local-rope", "gpt-oss-sinks", "mistral-window4")

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", WINDOWED_SPECS)
def test_window_pool_greedy_parity(
    name: str, tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture
) -> None:
    spec = SPECS_BY_NAME[name]
    spec = dataclasses.replace(spec, overrides={**spec.overrides, "vocab_size": 49152})
    directory = tmp_path_factory.mktemp(name)
    checkpoint = build_checkpoint(spec, directory)
    open_model_source(None).load_tokenizer().save_pretrained(str(directory))
    window = checkpoint.config.sliding_window
    assert window is not None and window < 20
    args = ServerArgs(
        model_path=str(directory),
        device="cpu",
        max_total_tokens=512,
        chunked_prefill_size=CHUNK,
        swa_full_tokens_ratio=0.01,
        cpu_threads=1,
        cuda_graph_max_bs=4,
    )
    with caplog.at_level(logging.INFO):
        scheduler, _ = build_scheduler(args)
    pool = scheduler.window_pool
    assert pool is not None and pool.num_slots - 1 == CHUNK + window + 64 < 512
    assert "keep only their window" in caplog.text and "MiB less" in caplog.text
    gen = torch.Generator().manual_seed(5)
    shared = torch.randint(100, 49152, (20,), generator=gen).tolist()
    prompts = [shared + torch.randint(100, 49152, (n,), generator=gen).tolist() for n in (7, 13)]
    outputs: dict[str, list[int]] = {}
    with model_threads():
        for i, prompt in enumerate(prompts):
            request = make_request(prompt, rid=f"r{i}", max_new_tokens=NEW_TOKENS, ignore_eos=True)
            outputs[request.rid] = []
            scheduler.add_request(request)
            while scheduler.has_work:
                for update in scheduler.step():
                    outputs[update.rid].extend(update.new_token_ids)
    assert scheduler.stats["cached_tokens"] > 0, "the second request extended no cached prefix"
    assert scheduler.runner.step_stats.static_steps > 0
    for i, prompt in enumerate(prompts):
        assert outputs[f"r{i}"] == hf_greedy(checkpoint.hf_model, torch.tensor(prompt), NEW_TOKENS), f"{name} r{i}"
    assert scheduler.flush_cache()
    assert pool.allocated_slots().numel() == 0
