"""Offline throughput: 64 prompts x 128 new tokens through `Engine.generate` (one batch call:
continuous batching) vs transformers `generate` on the same prompts in static batches.

Greedy, end-of-sequence ignored, so both sides generate exactly 64 x 128 tokens. Throughput is
generated tokens per second of wall time (prefill included). Target: ours >= 3x transformers.

    .venv/bin/python benchmarks/bench_offline.py [--prompts 64] [--new-tokens 128] [--hf-batch-size 16]
"""

from __future__ import annotations

import argparse

from runtime_common import chat_prompts, engine_threads, hf_generate, load_transformers, report, timed

from sglang.runtime.engine import Engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--hf-batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    threads = engine_threads()
    model, tokenizer = load_transformers(threads)
    prompts = chat_prompts(tokenizer, args.prompts)
    params = {"temperature": 0.0, "max_new_tokens": args.new_tokens, "ignore_eos": True}
    expected = args.prompts * args.new_tokens

    def transformers_batches() -> int:
        return sum(
            hf_generate(model, tokenizer, prompts[i : i + args.hf_batch_size], args.new_tokens)
            for i in range(0, len(prompts), args.hf_batch_size)
        )

    ours, theirs = [], []
    with Engine(device="cpu", cpu_threads=threads, log_level="warning") as engine:
        engine.generate("Warm-up: the river wound through the valley", {**params, "max_new_tokens": 4})
        hf_generate(model, tokenizer, prompts[:2], 4)
        # Alternating rounds: both sides see the same share of the machine's other work.
        for _ in range(args.rounds):
            engine.flush_cache()
            seconds, outs = timed(lambda: engine.generate(prompts, params))
            assert sum(o["meta_info"]["completion_tokens"] for o in outs) == expected
            ours.append(expected / seconds)
            seconds, generated = timed(transformers_batches)
            assert generated == expected
            theirs.append(expected / seconds)
    report(
        f"Offline throughput, {args.prompts} prompts x {args.new_tokens} new tokens (greedy), best of {args.rounds}",
        [
            ("ours (Engine.generate, one batch call)", max(ours), "tok/s"),
            (f"transformers generate, static batches of {args.hf_batch_size}", max(theirs), "tok/s"),
            ("ours, every round", sum(ours) / len(ours), "tok/s mean"),
            ("transformers, every round", sum(theirs) / len(theirs), "tok/s mean"),
        ],
        ("ours / transformers (best rounds)", max(ours) / max(theirs), 3.0),
    )


if __name__ == "__main__":
    main()
