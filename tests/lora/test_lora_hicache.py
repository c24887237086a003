"""The hierarchical cache under LoRA: stored blocks are keyed by the adapter's weights, not by the
load's uid, so after a restart that loads the adapters in another order (uids swapped) a prompt
under adapter `a` reads `a`'s blocks back and gets `a`'s output, and the same prompt under `b`
(whose uid is now `a`'s old one) or under the base model never reads them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from sglang.runtime.loader.tokenizer import load_tokenizer
from sglang.runtime.processes.detokenizer import Detokenizer
from sglang.runtime.scheduler.process import build_scheduler
from sglang.runtime.server_args import ServerArgs
from tests.runtime.runtime_harness import make_request, model_threads, run_requests

BLOCK = 4
PROMPT = list(range(300, 300 + 5 * BLOCK + 2))


def serve(model_dir: Path, adapters: dict[str, Path], order: tuple[str, ...], folder: Path):
    args = ServerArgs(
        model_path=str(model_dir),
        device="cpu",
        max_total_tokens=1024,
        cpu_threads=1,
        lora_paths=tuple(f"{name}={adapters[name]}" for name in order),
        max_loras_per_batch=2,
        enable_hierarchical_cache=True,
        hicache_ratio=0,
        hicache_storage_backend="file",
        hicache_storage_prefetch_policy="wait_complete",
        hicache_storage_backend_extra_config=json.dumps({"storage_dir": str(folder), "block_tokens": BLOCK}),
    )
    return build_scheduler(args)


def run(scheduler, info, adapter: str | None) -> tuple[list[int], dict]:
    request = dataclasses.replace(make_request(PROMPT, max_new_tokens=4, ignore_eos=True), lora_path=adapter)
    outcome = run_requests(scheduler, Detokenizer(load_tokenizer(Path(info.tokenizer_path))), [request])[request.rid]
    return outcome.output_ids, outcome.meta["cached_tokens_details"]


def test_stored_blocks_follow_the_adapter_across_a_restart(lora_models, tmp_path: Path) -> None:
    model = lora_models("llama")
    with model_threads():
        first, info = serve(model.path, model.adapters, ("a", "b"), tmp_path)
        cold = {name: run(first, info, name)[0] for name in ("a", None)}
        assert first.hicache.flush(10)
        first.hicache.close(1)
        # Six whole blocks of KV (prompt and output) under each of a and the base: other keys.
        assert len(list(tmp_path.rglob("*.kv"))) == 2 * 6

        second, info = serve(model.path, model.adapters, ("b", "a"), tmp_path)
        assert second.lora.lookup("b").uid == first.lora.lookup("a").uid  # the old uid, another adapter
        b_out, b_details = run(second, info, "b")
        a_out, a_details = run(second, info, "a")
        base_out, base_details = run(second, info, None)
        second.hicache.close(1)
    assert b_details["storage"] == 0  # a's blocks are not b's
    assert a_details["storage"] == base_details["storage"] == 5 * BLOCK
    assert a_out == cold["a"] and base_out == cold[None]
    assert b_out != cold["a"]
