"""DeepSeek-V3 (multi-head latent attention) through the real scheduler: the KV pool holds the
MLA backend's latent layout and is sized from it, a second request reuses the first one's
prefix from the radix cache, decode capture is asked for (MLA backends run such steps eagerly,
and say why), and every request's greedy tokens equal transformers' on the same weights."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from sglang.ci.suites.model_harness import SPECS_BY_NAME, build_checkpoint, hf_greedy
from sglang.runtime.execution.model_runner import kv_bytes_per_token
from sglang.runtime.loader import open_model_source
from sglang.runtime.loader.tokenizer import load_tokenizer
from sglang.runtime.processes.detokenizer import Detokenizer
from sglang.runtime.scheduler.process import build_scheduler
from sglang.runtime.server_args import ServerArgs
from tests.runtime.runtime_harness import make_request, model_threads, run_requests

NEW_TOKENS = 6


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory: pytest.TempPathFactory):
    """The parity suite's DeepSeek-V3 spec with the embedded tokenizer's vocabulary."""
    spec = SPECS_BY_NAME["deepseek-v3-mla"]
    spec = dataclasses.replace(spec, overrides={**spec.overrides, "vocab_size": 49152})
    directory = tmp_path_factory.mktemp("deepseek-v3")
    checkpoint = build_checkpoint(spec, directory)
    open_model_source(None).load_tokenizer().save_pretrained(str(directory))
    return checkpoint


def test_latent_kv_pool_radix_reuse_and_greedy_parity(deepseek) -> None:
    args = ServerArgs(
        model_path=str(deepseek.path),
        device="cpu",
        max_total_tokens=512,
        page_size=16,
        cpu_threads=1,
        cuda_graph_max_bs=4,
    )
    scheduler, info = build_scheduler(args)
    runner = scheduler.runner
    mla = deepseek.config.mla
    width = mla.kv_lora_rank + mla.qk_rope_head_dim
    assert tuple(runner.kv_buffers[0].shape) == (runner.num_slots, width)
    assert kv_bytes_per_token(runner.model, runner.attn_backend) == deepseek.config.num_layers * width * 4
    gen = torch.Generator().manual_seed(5)
    shared = torch.randint(100, 49152, (20,), generator=gen).tolist()
    prompts = [shared + torch.randint(100, 49152, (n,), generator=gen).tolist() for n in (3, 5)]
    detokenizer = Detokenizer(load_tokenizer(Path(info.tokenizer_path)))
    with model_threads():
        outcomes = [
            next(iter(run_requests(scheduler, detokenizer, [make_request(p, max_new_tokens=NEW_TOKENS)]).values()))
            for p in prompts
        ]
    assert outcomes[1].meta["cached_tokens"] >= 16, "the second request did not reuse the shared prefix"
    for prompt, outcome in zip(prompts, outcomes):
        expected = hf_greedy(deepseek.hf_model, torch.tensor(prompt), NEW_TOKENS)
        assert outcome.output_ids == expected
