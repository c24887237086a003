"""Single-stream greedy decode speed: our `Engine` vs transformers `generate`, same model.

One chat prompt, 128 new tokens (end-of-sequence ignored), greedy, one request at a time. Each
side runs `--repeats` times, alternating, after a warm-up; the best run of each is compared
(the least disturbed by other work on the machine). Target: ours at least 1/1.5 of transformers'
tokens/s.

    .venv/bin/python benchmarks/bench_decode.py [--new-tokens 128] [--repeats 3]
"""

from __future__ import annotations

import argparse

from runtime_common import chat_prompts, engine_threads, hf_generate, load_transformers, report, timed

from sglang.runtime.engine import Engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    threads = engine_threads()
    model, hf_tokenizer = load_transformers(threads)
    prompt = chat_prompts(hf_tokenizer, 1)[0]
    params = {"temperature": 0.0, "max_new_tokens": args.new_tokens, "ignore_eos": True}
    ours, theirs = [], []
    with Engine(device="cpu", cpu_threads=threads, log_level="warning") as engine:
        engine.generate(prompt, {**params, "max_new_tokens": 8})
        hf_generate(model, hf_tokenizer, [prompt], 8)
        for _ in range(args.repeats):
            engine.flush_cache()  # every run prefills its prompt, as transformers does
            seconds, out = timed(lambda: engine.generate(prompt, params))
            ours.append(out["meta_info"]["completion_tokens"] / seconds)
            seconds, generated = timed(lambda: hf_generate(model, hf_tokenizer, [prompt], args.new_tokens))
            theirs.append(generated / seconds)
    report(
        f"Single-stream greedy decode, {args.new_tokens} new tokens, best of {args.repeats}",
        [
            ("ours (Engine.generate) tokens/s", max(ours), "tok/s"),
            ("transformers generate tokens/s", max(theirs), "tok/s"),
            ("ours, every run", sum(ours) / len(ours), "tok/s mean"),
            ("transformers, every run", sum(theirs) / len(theirs), "tok/s mean"),
        ],
        ("ours / transformers (best runs)", max(ours) / max(theirs), 1 / 1.5),
    )


if __name__ == "__main__":
    main()
