"""Helpers shared by the runtime benchmarks: the embedded model as a transformers model, timing,
prompts, and a report header that says how loaded the machine was.

Each benchmark compares two setups within one run and prints their ratio; absolute figures on a
shared machine move with its load, ratios much less. Threads: `SGLANG_CPU_THREADS` sets the
engine's torch threads (unset: torch's default); the transformers side uses the same count.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

TOPICS = [
    "the moon",
    "volcanoes",
    "bread baking",
    "honey bees",
    "the Roman empire",
    "chess",
    "rainbows",
    "glaciers",
    "electric cars",
    "the printing press",
    "coral reefs",
    "jazz music",
    "penguins",
    "the water cycle",
    "bicycles",
    "lighthouses",
    "tea ceremonies",
    "black holes",
    "origami",
    "the Silk Road",
    "thunderstorms",
    "solar panels",
    "octopuses",
    "the Olympic games",
    "maple syrup",
    "submarines",
    "deserts",
    "the violin",
    "earthquakes",
    "paper money",
    "wolves",
    "windmills",
]


def engine_threads() -> int | None:
    value = os.environ.get("SGLANG_CPU_THREADS")
    return int(value) if value else None


def chat_prompts(tokenizer: Any, count: int) -> list[str]:
    """`count` chat-templated prompts asking about different topics (about 40 tokens each)."""
    prompts = []
    for i in range(count):
        topic = TOPICS[i % len(TOPICS)]
        style = ("a short paragraph", "three facts", "a short poem", "a simple explanation")[i // len(TOPICS) % 4]
        messages = [{"role": "user", "content": f"Write {style} about {topic}."}]
        prompts.append(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    return prompts


def hf_folder() -> Path:
    """The embedded model converted to a plain Hugging Face folder (the loader's cache)."""
    from sglang.runtime.loader import embedded_model_path
    from sglang.runtime.loader.gguf_source import cached_folder

    return cached_folder(embedded_model_path())


def hf_tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(hf_folder())


def load_transformers(threads: int | None) -> tuple[Any, Any]:
    """The embedded model and its tokenizer as transformers objects (fp32, eval mode)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads:
        torch.set_num_threads(threads)
    folder = hf_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return model, tokenizer


def hf_generate(model: Any, tokenizer: Any, prompts: list[str], new_tokens: int) -> int:
    """Greedy `generate` of exactly `new_tokens` tokens for each of `prompts` as one padded
    batch; returns the number of tokens generated."""
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.inference_mode():
        out = model.generate(
            **batch,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    return (out.shape[1] - batch["input_ids"].shape[1]) * len(prompts)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def machine_line() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    threads = os.environ.get("SGLANG_CPU_THREADS") or f"unset (torch default {torch.get_num_threads()})"
    return f"{os.cpu_count()} CPUs, load average {load}; SGLANG_CPU_THREADS {threads}"


def report(title: str, rows: list[tuple[str, float, str]], ratio: tuple[str, float, float]) -> None:
    """Prints `rows` (name, value, unit) and the ratio line (label, value, target)."""
    print(f"\n{title}\n{machine_line()}")
    for name, value, unit in rows:
        print(f"  {name:<46} {value:>10.2f} {unit}")
    label, value, target = ratio
    verdict = "meets" if value >= target else "misses"
    print(f"  {label:<46} {value:>10.2f}x  ({verdict} the {target:g}x target)")
