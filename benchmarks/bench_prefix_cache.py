"""Prefix cache: 32 requests sharing a ~1000-token few-shot prefix, each ending in its own
~30-token question, sent as one batch; the engine with its prefix cache on vs off
(`disable_radix_cache=True`). Target: >= 3x faster with the cache on.

With the cache on, one request computes the shared prefix and the others reuse its KV (they
wait for it: in-batch prefix caching), so about 1000 + 32 x 30 prompt tokens are computed
instead of 32 x 1030.

    .venv/bin/python benchmarks/bench_prefix_cache.py [--requests 32] [--new-tokens 8]
"""

from __future__ import annotations

import argparse

from runtime_common import TOPICS, engine_threads, hf_tokenizer, report, timed

from sglang.runtime.engine import Engine

FACTS = [
    ("France", "Paris"),
    ("Japan", "Tokyo"),
    ("Italy", "Rome"),
    ("Egypt", "Cairo"),
    ("Canada", "Ottawa"),
    ("Kenya", "Nairobi"),
    ("Peru", "Lima"),
    ("Norway", "Oslo"),
    ("India", "New Delhi"),
    ("Chile", "Santiago"),
    ("Spain", "Madrid"),
    ("Greece", "Athens"),
    ("Cuba", "Havana"),
    ("Ireland", "Dublin"),
    ("Poland", "Warsaw"),
]


def few_shot_prefix(tokenizer, target_tokens: int) -> str:
    """Worked question/answer examples until the text is about `target_tokens` tokens long."""
    lines = ["Answer each question in one short sentence.\n"]
    i = 0
    while len(tokenizer.encode("".join(lines), add_special_tokens=False)) < target_tokens:
        country, capital = FACTS[i % len(FACTS)]
        topic = TOPICS[i % len(TOPICS)]
        lines.append(
            f"Question: What is the capital of {country}, and what do people there say about {topic}?\n"
            f"Answer: The capital of {country} is {capital}; people there like to talk about {topic}.\n"
        )
        i += 1
    return "".join(lines)


def questions(count: int) -> list[str]:
    """`count` distinct questions of about 30 tokens."""
    return [
        f"Question: Example {i}: what is the capital of {FACTS[i % len(FACTS)][0]}, "
        f"and what might a visitor learn there about {TOPICS[(i * 7) % len(TOPICS)]}?\nAnswer:"
        for i in range(count)
    ]


def run(prompts: list[str], new_tokens: int, threads: int | None, disable: bool) -> tuple[float, int, int]:
    """Seconds for the batch, prompt tokens and cached tokens in all."""
    params = {"temperature": 0.0, "max_new_tokens": new_tokens, "ignore_eos": True}
    with Engine(device="cpu", cpu_threads=threads, disable_radix_cache=disable, log_level="warning") as engine:
        engine.generate("Warm-up: the river wound through the valley", {**params, "max_new_tokens": 4})
        engine.flush_cache()
        seconds, outs = timed(lambda: engine.generate(prompts, params))
    prompt_tokens = sum(o["meta_info"]["prompt_tokens"] for o in outs)
    cached = sum(o["meta_info"]["cached_tokens"] for o in outs)
    return seconds, prompt_tokens, cached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--prefix-tokens", type=int, default=1000)
    parser.add_argument("--new-tokens", type=int, default=8)
    args = parser.parse_args()
    tokenizer = hf_tokenizer()
    prefix = few_shot_prefix(tokenizer, args.prefix_tokens)
    prompts = [prefix + q for q in questions(args.requests)]
    threads = engine_threads()
    # On, off, on again (the best "on" run counts): the short runs bracket the long one, so a
    # burst of other work on the machine cannot favour the cache.
    on, tokens, cached_on = run(prompts, args.new_tokens, threads, disable=False)
    off, _, cached_off = run(prompts, args.new_tokens, threads, disable=True)
    on = min(on, run(prompts, args.new_tokens, threads, disable=False)[0])
    prefix_len = len(tokenizer.encode(prefix, add_special_tokens=False))
    report(
        f"Prefix cache, {args.requests} requests, {prefix_len}-token shared prefix, "
        f"{tokens / args.requests - prefix_len:.0f}-token questions, {args.new_tokens} new tokens",
        [
            ("cache on: seconds", on, "s"),
            ("cache off (disable_radix_cache): seconds", off, "s"),
            ("cache on: cached prompt tokens", cached_on, f"of {tokens}"),
            ("cache off: cached prompt tokens", cached_off, f"of {tokens}"),
        ],
        ("cache off / cache on (time)", off / on, 3.0),
    )


if __name__ == "__main__":
    main()
