"""Single-stream greedy decode with NGRAM speculative decoding vs without, same model, same prompts.

Two engines serve the embedded model side by side, one with `speculative_algorithm="NGRAM"`;
each prompt goes to both, one request at a time, alternating which goes first, best of
`--repeats`. Prompts of two kinds: answers that repeat the prompt (rewrite a paragraph with one
word changed, extract a record's fields, continue code) and open questions. Reported per kind:
tokens/s of each side, the ratio, and NGRAM's acceptance (`spec_accept_rate`,
`spec_accept_length` from `meta_info`). Targets (issue 24): >= 1.8x on repeating prompts,
>= 0.95x on open questions.

    .venv/bin/python benchmarks/bench_speculative.py [--new-tokens 96] [--repeats 2] [--dtype float32] [--adaptive]
"""

from __future__ import annotations

import argparse
from typing import Any

from runtime_common import engine_threads, hf_tokenizer, report, timed

from sglang.runtime.engine import Engine

PARAGRAPH = (
    "The river wound through the valley past old mills and stone bridges. Farmers brought grain to the "
    "market every Thursday, and the baker on the square sold bread before sunrise."
)
REPEATING = (
    f"Rewrite this paragraph exactly, changing only the word 'Thursday' to 'Friday':\n\n{PARAGRAPH}",
    "Extract the fields name, city, email and phone from this record as 'field: value' lines:\n\n"
    "Record 4411 -- name: Maria Lopez; city: Valencia; email: maria.lopez@example.com; phone: +34 600 123 456; "
    "joined: 2019",
    "Continue this Python code, adding a method `area` like `perimeter`:\n\n"
    "class Rectangle:\n    def __init__(self, width, height):\n        self.width = width\n"
    "        self.height = height\n\n    def perimeter(self):\n        return 2 * (self.width + self.height)\n",
)
OPEN = (
    "Why is the sky blue? Answer in three sentences.",
    "Give three tips for learning a new language.",
)


def run_kind(plain: Engine, spec: Engine, prompts: list[str], params: dict[str, Any], repeats: int) -> dict:
    """Summed best-of-`repeats` seconds and tokens of each side over `prompts`, and acceptance."""
    totals = {"plain_s": 0.0, "spec_s": 0.0, "tokens": 0, "drafted": 0, "accepted": 0, "verify": 0}
    for i, prompt in enumerate(prompts):
        best = {"plain": float("inf"), "spec": float("inf")}
        for r in range(repeats):
            order = [("plain", plain), ("spec", spec)][:: 1 if (i + r) % 2 == 0 else -1]
            for name, engine in order:
                engine.flush_cache()  # every run prefills its prompt
                seconds, out = timed(lambda engine=engine, prompt=prompt: engine.generate(prompt, params))
                best[name] = min(best[name], seconds)
                meta = out["meta_info"]
                if name == "spec" and r == 0:
                    totals["tokens"] += meta["completion_tokens"]
                    totals["drafted"] += meta.get("spec_num_proposed_drafts", 0)
                    totals["accepted"] += meta.get("spec_num_correct_drafts", 0)
                    totals["verify"] += meta.get("spec_verify_ct", 0)
        totals["plain_s"] += best["plain"]
        totals["spec_s"] += best["spec"]
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", default="auto", help="auto keeps the GGUF's Q4_1 blocks; float32 dequantizes")
    parser.add_argument("--adaptive", action="store_true", help="NGRAM with --speculative-adaptive")
    args = parser.parse_args()
    threads = engine_threads()
    tokenizer = hf_tokenizer()

    def chat(question: str) -> str:
        messages = [{"role": "user", "content": question}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    params = {"temperature": 0.0, "max_new_tokens": args.new_tokens}
    common = {
        "device": "cpu",
        "cpu_threads": threads,
        "log_level": "warning",
        "max_total_tokens": 4096,
        "dtype": args.dtype,
    }
    with (
        Engine(**common) as plain,
        Engine(**common, speculative_algorithm="NGRAM", speculative_adaptive=args.adaptive) as spec,
    ):
        for engine in (plain, spec):
            engine.generate(chat(OPEN[0]), {**params, "max_new_tokens": 8})
        for kind, prompts, target in (("repeating", REPEATING, 1.8), ("open", OPEN, 0.95)):
            t = run_kind(plain, spec, [chat(p) for p in prompts], params, args.repeats)
            rate = t["accepted"] / t["drafted"] if t["drafted"] else 0.0
            report(
                f"{kind} prompts ({len(prompts)}), greedy, up to {args.new_tokens} new tokens, best of {args.repeats}",
                [
                    ("without speculation", t["tokens"] / t["plain_s"], "tok/s"),
                    ("NGRAM", t["tokens"] / t["spec_s"], "tok/s"),
                    ("NGRAM acceptance rate (accepted / drafted)", rate, ""),
                    ("NGRAM tokens per decode step", t["tokens"] / max(t["verify"], 1), ""),
                ],
                ("NGRAM / without", t["plain_s"] / t["spec_s"], target),
            )


if __name__ == "__main__":
    main()
