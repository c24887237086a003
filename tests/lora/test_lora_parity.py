"""Multi-LoRA batches against PEFT: a mixed batch [base, a, b, a, c] on one scheduler, each
request's greedy tokens and log-probabilities equal to those of its own PEFT model.

Runs on the tiny Llama and Qwen2 (tests/lora/conftest.py), with the cpu platform's LoRA ops
(cpu C++ where its kernels are built, else torch_native) and with every op forced to its
reference, decode capture on and off, and on the tpu platform on XLA:CPU (its jax family's LoRA
ops traced into jitted steps; tests/tpu/test_jit_step_lora.py covers those steps by default). One
eager and one captured case run by default, the rest under `-m slow`. With
`$SGLANG_KERNEL_FAMILIES=triton` and `TRITON_INTERPRET=1` the cpu cases run the Triton kernels in
Triton's interpreter.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest
import torch

from sglang.ci.suites.lora_adapters import peft_reference, reference_log_probs
from sglang.ops.binding import restore, snapshot
from sglang.runtime.loader.tokenizer import load_tokenizer
from sglang.runtime.processes.detokenizer import Detokenizer
from sglang.runtime.processes.messages import LogprobRequest
from sglang.runtime.scheduler.process import build_scheduler
from sglang.runtime.server_args import ServerArgs
from tests.runtime.runtime_harness import make_request, model_threads, run_requests

BATCH = (None, "a", "b", "a", "c")
NEW_TOKENS = 6
LOGPROB_ATOL = 2e-4
"""fp32: our log-probabilities and PEFT's differ only by summation order."""


def serve(model_dir: Path, adapters: dict[str, Path], device: str = "cpu", **changes):
    args = ServerArgs(
        model_path=str(model_dir),
        device=device,
        max_total_tokens=2048,
        cpu_threads=1,
        lora_paths=tuple(f"{name}={path}" for name, path in adapters.items()),
        max_loras_per_batch=3,
        **changes,
    )
    return build_scheduler(args)


def prompts(count: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(7)
    # Two share a prefix under different adapters: their KV must not be shared.
    shared = torch.randint(17, 49152, (12,), generator=gen).tolist()
    out = [shared + torch.randint(17, 49152, (3 + i,), generator=gen).tolist() for i in range(count)]
    return out


EAGER = {"disable_cuda_graph": True}
CAPTURE = {"cuda_graph_max_bs": 8}
REFERENCE = {"reference_ops": True, "disable_cuda_graph": True}
TPU = {"device": "tpu"}
"""The tpu platform on XLA:CPU (`JAX_PLATFORMS=cpu`): every step a jitted function, the jax
family's LoRA ops traced into it."""
slow = pytest.mark.slow


@pytest.mark.parametrize(
    ("kind", "changes"),
    [
        pytest.param("llama", EAGER, id="llama-eager"),
        pytest.param("qwen2", CAPTURE, id="qwen2-capture"),
        pytest.param("llama", CAPTURE, id="llama-capture", marks=slow),
        pytest.param("qwen2", EAGER, id="qwen2-eager", marks=slow),
        pytest.param("llama", REFERENCE, id="llama-reference-ops", marks=slow),
        pytest.param("qwen2", REFERENCE, id="qwen2-reference-ops", marks=slow),
        pytest.param("llama", TPU, id="llama-tpu", marks=slow),
        pytest.param("qwen2", TPU, id="qwen2-tpu", marks=slow),
    ],
)
def test_mixed_batch_matches_peft(lora_models, kind: str, changes: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    if changes is TPU:
        if any(importlib.util.find_spec(p) is None for p in ("jax", "torchax")):
            pytest.skip("the tpu platform needs jax and torchax (the [tpu] extra)")
        monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    model = lora_models(kind)
    saved = snapshot()
    try:
        with model_threads():
            scheduler, info = serve(model.path, model.adapters, **changes)
            requests = [
                dataclasses.replace(
                    make_request(ids, max_new_tokens=NEW_TOKENS, ignore_eos=True, logprobs=LogprobRequest(True)),
                    lora_path=adapter,
                )
                for ids, adapter in zip(prompts(len(BATCH)), BATCH)
            ]
            outcomes = run_requests(scheduler, Detokenizer(load_tokenizer(Path(info.tokenizer_path))), requests)
    finally:
        restore(saved)
    if "cuda_graph_max_bs" in changes:
        assert scheduler.runner.step_stats.static_steps > 0, "no decode step replayed a captured bucket"
    if changes is TPU:
        compiled = [r.shape for r in scheduler.runner.step_runner.records]
        assert any(shape.lora for shape in compiled), f"no jitted step read LoRA slots: {compiled}"
    references = {name: peft_reference(model.path, model.adapters.get(name)) for name in set(BATCH)}
    for request in requests:
        out = outcomes[request.rid]
        assert len(out.output_ids) == NEW_TOKENS
        expected = reference_log_probs(references[request.lora_path], request.input_ids, out.output_ids)
        assert expected.argmax(-1).tolist() == out.output_ids, f"greedy tokens differ under {request.lora_path}"
        ours = torch.tensor([lp for lp, *_ in out.meta["output_token_logprobs"]])
        theirs = expected.gather(1, torch.tensor(out.output_ids)[:, None]).squeeze(1)
        torch.testing.assert_close(ours, theirs, atol=LOGPROB_ATOL, rtol=0)
    # The adapters changed something: the same prompt under another adapter gives other log-probs.
    base = peft_reference(model.path, None)
    first = requests[1]
    assert not torch.allclose(
        reference_log_probs(base, first.input_ids, outcomes[first.rid].output_ids),
        reference_log_probs(references["a"], first.input_ids, outcomes[first.rid].output_ids),
        atol=1e-2,
    )
