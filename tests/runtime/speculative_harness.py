"""Tiny random-weight models behind an in-process scheduler, for speculative decoding's tests.

Random weights make greedy outputs fall into loops, which is what n-gram drafts hit; a 97-token
vocabulary keeps the chi-square test's bins few. Token ids are their own text (`tail_text`), so
stop strings act on digits.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import torch

from sglang.platforms.cpu.platform import CpuPlatform
from sglang.platforms.kernels.cpu_cpp.attention import PoolDecodeAttention
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.memory.token_allocator import PagedTokenAllocator
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.decoder import DecoderForCausalLM
from sglang.runtime.models.registry import model_class_for
from sglang.runtime.processes.messages import GenerateRequest, LogprobRequest
from sglang.runtime.requests.meta_info import MetaInfo
from sglang.runtime.requests.sampling_params import SamplingParams
from sglang.runtime.scheduler.scheduler import Scheduler
from sglang.runtime.server_args import ServerArgs
from sglang.runtime.speculative.config import speculative_config
from sglang.runtime.speculative.draft_model import DraftModelDrafter
from sglang.runtime.speculative.speculator import build_speculator

from ..tiny_decoder import TINY_LLAMA_CONFIG, WEIGHT_SCALE

CONTEXT = TINY_LLAMA_CONFIG["max_position_embeddings"]
VOCAB = TINY_LLAMA_CONFIG["vocab_size"]
ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")


def tiny_model(
    architecture: str, seed: int = 0, vocab_size: int = VOCAB, scale: float = WEIGHT_SCALE
) -> DecoderForCausalLM:
    """The tiny decoder shape of `tests/tiny_decoder.py` as `architecture` (Qwen2: q/k/v
    biases), every parameter drawn from a generator seeded with `seed` times `scale`."""
    raw = {**TINY_LLAMA_CONFIG, "architectures": [architecture], "vocab_size": vocab_size}
    config = ModelConfig.from_dict(raw)
    model = model_class_for(config)(config, torch.float32)
    gen = torch.Generator().manual_seed(seed)
    for param in model.parameters():
        param.data = torch.randn(param.shape, generator=gen) * scale
    return model.eval()


def tail_text(ids: list[int]) -> str:
    return "".join(f"<{i}>" for i in ids)


def make_scheduler(model: DecoderForCausalLM, kv_tokens: int = 2048, captured: bool = False, **args: Any) -> Scheduler:
    """`captured`: decode (and verify) batches replay cpu's traced buckets over the cpu_cpp
    attention backend, as a server runs them; otherwise every step is eager."""
    server_args = ServerArgs(device="cpu", max_total_tokens=kv_tokens, **args)
    allocator = PagedTokenAllocator(kv_tokens // server_args.page_size + 1, server_args.page_size)
    platform = CpuPlatform()
    buckets, backend = None, None
    if captured:
        buckets = server_args.graph_buckets(platform.capabilities)
        heads, kv_heads = model.attention_heads
        backend = PoolDecodeAttention(heads, kv_heads, model.config.head_dim, model.dtype, platform.device())
    runner = ModelRunner(model, platform, allocator.num_slots, backend, buckets)
    return Scheduler(runner, allocator, server_args, tail_text, frozenset(), CONTEXT, grammar=None)


_rids = itertools.count()


def request(prompt: list[int], logprobs: bool = False, **params: Any) -> GenerateRequest:
    params = {"temperature": 0.0, "max_new_tokens": 24, **params}
    sampling = SamplingParams.from_dict(params)
    sampling.validate(VOCAB)
    want = LogprobRequest(return_logprob=True, top_logprobs_num=2) if logprobs else LogprobRequest()
    return GenerateRequest(f"s{next(_rids)}", list(prompt), sampling.normalize(), want)


@dataclass
class Result:
    output_ids: list[int] = field(default_factory=list)
    finish_reason: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def run(scheduler: Scheduler, requests: list[GenerateRequest], max_steps: int = 3000) -> dict[str, Result]:
    """Runs `requests` together until the scheduler is idle; each one's tokens and meta_info."""
    results = {r.rid: Result() for r in requests}
    infos = {r.rid: MetaInfo(r.logprobs) for r in requests}
    for r in requests:
        scheduler.add_request(r)
    for _ in range(max_steps):
        if not scheduler.has_work:
            break
        for update in scheduler.step():
            result = results[update.rid]
            result.output_ids.extend(update.new_token_ids)
            infos[update.rid].add(update.meta)
            if update.finish_reason is not None:
                result.finish_reason = update.finish_reason.to_json()
                result.meta = infos[update.rid].to_json(update.rid, update.finish_reason)
    assert not scheduler.has_work, "the scheduler did not finish its work"
    return results


def prompts(count: int, length: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (length,), generator=gen).tolist() for _ in range(count)]


def make_standalone_scheduler(target: DecoderForCausalLM, draft: DecoderForCausalLM, steps: int = 3) -> Scheduler:
    """A scheduler whose speculator drafts with `draft` (STANDALONE), in a pool of its own."""
    args = {"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": "in-process"}
    config = speculative_config(ServerArgs(speculative_num_steps=steps, **args))
    allocator = PagedTokenAllocator(2048 + 1, 1)
    drafter = DraftModelDrafter(ModelRunner(draft, CpuPlatform(), allocator.num_slots), allocator, steps)
    scheduler = make_scheduler(target)
    scheduler.speculator = build_speculator(config, drafter)
    return scheduler
