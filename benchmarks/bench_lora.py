"""Multi-LoRA throughput: one batch of 32 requests spread over 1, 4 and 16 adapters, against the
same batch on the same engine without adapters and on an engine started without `--enable-lora`.

The model is the embedded one; the adapters are random rank-16 PEFT folders over q/k/v/o/gate/up/
down written into a temporary folder (A ~ N(0, 1/hidden), B ~ N(0, 1/rank): they move the logits
like trained adapters, and the throughput does not depend on their values). Every configuration
generates the same prompts (`--prompt-tokens` random tokens each, `--new-tokens` greedy tokens,
`ignore_eos`) in one `generate` call after an untimed warm-up of the same batch. Both engines
stay up and the configurations are timed in turn, `--repeats` rounds; each one's best round is
printed (the least disturbed by other work on a shared machine): seconds, output tokens per
second and the ratio to the adapter-free engine's, with the load average.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_lora.py [--new-tokens 32] [--threads 1] [--repeats 3]

`--device tpu` (with `JAX_PLATFORMS=cpu`: the tpu platform on XLA:CPU) runs both engines' steps as
jitted functions, the adapters through the jax family's LoRA ops; the warm-up round compiles
every batch shape, so the timed rounds compile nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from sglang.runtime.engine import Engine
from sglang.runtime.loader.model_loading import load_model
from sglang.runtime.lora.adapter import CONFIG_FILE, PEFT_PREFIX, PROJECTIONS, WEIGHTS_FILE
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.server_args import ServerArgs

REQUESTS, RANK = 32, 16
ADAPTER_COUNTS = (1, 4, 16)


def projection_shapes(config: ModelConfig) -> dict[str, tuple[int, int]]:
    """(out, in) of each projection a LoRA targets."""
    q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    hidden, inner = config.hidden_size, config.intermediate_size
    return {
        "q_proj": (q, hidden),
        "k_proj": (kv, hidden),
        "v_proj": (kv, hidden),
        "o_proj": (hidden, q),
        "gate_proj": (inner, hidden),
        "up_proj": (inner, hidden),
        "down_proj": (hidden, inner),
    }


def write_adapter(folder: Path, config: ModelConfig, seed: int) -> Path:
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(config.num_layers):
        for name, (out, inp) in projection_shapes(config).items():
            group = "self_attn" if name in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            stem = f"{PEFT_PREFIX}model.layers.{layer}.{group}.{name}"
            tensors[f"{stem}.lora_A.weight"] = torch.randn(RANK, inp, generator=gen) * inp**-0.5
            tensors[f"{stem}.lora_B.weight"] = torch.randn(out, RANK, generator=gen) * RANK**-0.5
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / WEIGHTS_FILE))
    adapter_config = {"peft_type": "LORA", "r": RANK, "lora_alpha": RANK, "target_modules": list(PROJECTIONS)}
    (folder / CONFIG_FILE).write_text(json.dumps(adapter_config))
    return folder


def timed(engine: Engine, prompts: list[list[int]], adapters: list[str | None], new_tokens: int) -> float:
    params = {"temperature": 0.0, "max_new_tokens": new_tokens, "ignore_eos": True}
    started = time.perf_counter()
    outs = engine.generate(input_ids=prompts, sampling_params=params, lora_path=adapters)
    seconds = time.perf_counter() - started
    assert all(len(out["output_ids"]) == new_tokens for out in outs)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu, or tpu (on XLA:CPU with JAX_PLATFORMS=cpu)")
    args = parser.parse_args()
    engine_args = {"device": args.device, "cpu_threads": args.threads, "max_total_tokens": 8192}
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(1000, 40000, (REQUESTS, args.prompt_tokens), generator=gen).tolist()
    tokens = REQUESTS * args.new_tokens
    with tempfile.TemporaryDirectory() as tmp, Engine(**engine_args) as plain:
        config = load_model(ServerArgs(device="cpu", max_total_tokens=512)).config
        names = [f"r{i}" for i in range(max(ADAPTER_COUNTS))]
        paths = [f"{n}={write_adapter(Path(tmp) / n, config, seed)}" for seed, n in enumerate(names)]
        lora_args = {"lora_paths": tuple(paths), "max_loras_per_batch": max(ADAPTER_COUNTS), "max_lora_rank": RANK}
        with Engine(**engine_args, **lora_args) as engine:
            configs = [
                ("no --enable-lora", plain, [None] * REQUESTS),
                ("--enable-lora, base rows", engine, [None] * REQUESTS),
            ]
            for count in ADAPTER_COUNTS:
                configs.append((f"{count} adapter(s)", engine, [names[i % count] for i in range(REQUESTS)]))
            best = {label: float("inf") for label, _, _ in configs}
            for round_ in range(args.repeats + 1):  # round 0 warms every configuration up
                for label, on, adapters in configs:
                    seconds = timed(on, prompts, adapters, args.new_tokens)
                    best[label] = min(best[label], seconds) if round_ else best[label]
    rows = list(best.items())
    shape = f"{REQUESTS} requests x {args.prompt_tokens} prompt + {args.new_tokens} new tokens, rank {RANK}"
    print(f"# {shape}, best of {args.repeats}, device {args.device}")
    print(f"# {args.threads} thread(s), load average {os.getloadavg()[0]:.2f}")
    print("| batch | seconds | output tok/s | vs no LoRA |")
    print("|---|---|---|---|")
    for label, seconds in rows:
        print(f"| {label} | {seconds:.2f} | {tokens / seconds:.1f} | {seconds / rows[0][1]:.2f}x |")


if __name__ == "__main__":
    main()
