"""Single-stream greedy decode with NGRAM speculative decoding vs without, same model, same prompts.

Two engines serve the embedded model side by side, one with `speculative_algorithm="NGRAM"`;
each prompt goes to both, one request at a time, alternating which goes first, best of
`--repeats`. Prompts of three kinds: issue 24's examples of answers that repeat the prompt
(rewrite a paragraph with one word changed, extract a record's fields, continue code: the
embedded model's answers repeat them only in part), prompts its answers copy (a paragraph
repeated word for word, a class shown whole with a method added), and open questions. Reported
per kind: tokens/s of each side, the ratio, NGRAM's acceptance (`spec_accept_rate`,
`spec_accept_length` from `meta_info`) and the share of the answer that came from accepted
drafts. Targets (issue 24): >= 1.8x where answers repeat the prompt, >= 0.95x on open questions.

Two speeds per side: end to end (prefill included: every run flushes the prefix cache first) and
decode alone, the tokens after the first over the time after the first (`meta_info`'s
`e2e_latency - ttft`), which is what a server's TPOT and bench_peers' speculative row measure.
The prompts' prefill (~80-110 tokens) is about a quarter of a plain run's time, so end to end
reads well below the server's figures and dilutes the ratio.

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
STORY = (
    f"{PARAGRAPH} In winter the water froze at the edges, and children skated between the reeds while their "
    "parents carried firewood up the hill. The schoolhouse stood beside the church, and its bell rang at eight "
    "every morning."
)
RECTANGLE = (
    "class Rectangle:\n    def __init__(self, width, height):\n        self.width = width\n"
    "        self.height = height\n\n    def perimeter(self):\n        return 2 * (self.width + self.height)\n"
)
REPEATING = (
    f"Rewrite this paragraph exactly, changing only the word 'Thursday' to 'Friday':\n\n{PARAGRAPH}",
    "Extract the fields name, city, email and phone from this record as 'field: value' lines:\n\n"
    "Record 4411 -- name: Maria Lopez; city: Valencia; email: maria.lopez@example.com; phone: +34 600 123 456; "
    "joined: 2019",
    f"Continue this Python code, adding a method `area` like `perimeter`:\n\n{RECTANGLE}",
)
"""Issue 24's kinds of prompt whose answer repeats it; the embedded model's answers repeat them in part."""
COPYING = (
    f"Repeat this paragraph word for word, but write 'Friday' instead of 'Thursday':\n\n{STORY}",
    f"Add a method `area` to this class and show the whole class:\n\n```python\n{RECTANGLE}```",
)
"""Prompts whose answers (the embedded model's) copy most of them: where NGRAM's drafts are accepted."""
WARM_UP = (
    "Copy this list exactly, one item a line: apples, pears, plums, cherries, grapes, figs, lemons, limes, "
    "oranges, melons, peaches, apricots, dates, kiwis, mangoes, papayas, guavas, lychees."
)
"""A repeating prompt of its own (not one measured), so the NGRAM corpus holds none of their answers."""
OPEN = (
    "Why is the sky blue? Answer in three sentences.",
    "Give three tips for learning a new language.",
)

KINDS = {"repeating": (REPEATING, 1.8), "copying": (COPYING, 1.8), "open": (OPEN, 0.95)}
"""Prompt sets by name, with issue 24's target for NGRAM / without after the first token."""


def run_kind(plain: Engine, spec: Engine, prompts: list[str], params: dict[str, Any], repeats: int) -> dict:
    """Summed best-of-`repeats` seconds of each side over `prompts`, end to end (`*_s`) and after
    the first token (`*_decode_s`), the tokens each measure covers, and NGRAM's acceptance."""
    totals = dict.fromkeys(("plain_s", "spec_s", "plain_decode_s", "spec_decode_s"), 0.0)
    totals |= dict.fromkeys(("tokens", "drafted", "accepted", "verify"), 0)
    for i, prompt in enumerate(prompts):
        best = dict.fromkeys(("plain", "spec", "plain_decode", "spec_decode"), float("inf"))
        for r in range(repeats):
            order = [("plain", plain), ("spec", spec)][:: 1 if (i + r) % 2 == 0 else -1]
            for name, engine in order:
                engine.flush_cache()  # every run prefills its prompt
                seconds, out = timed(lambda engine=engine, prompt=prompt: engine.generate(prompt, params))
                meta = out["meta_info"]
                best[name] = min(best[name], seconds)
                best[f"{name}_decode"] = min(best[f"{name}_decode"], meta["e2e_latency"] - meta["ttft"])
                if name == "spec" and r == 0:
                    totals["tokens"] += meta["completion_tokens"]
                    totals["drafted"] += meta.get("spec_num_proposed_drafts", 0)
                    totals["accepted"] += meta.get("spec_num_correct_drafts", 0)
                    totals["verify"] += meta.get("spec_verify_ct", 0)
        for key, seconds in best.items():
            totals[f"{key}_s"] += seconds
    totals["decode_tokens"] = totals["tokens"] - len(prompts)
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", default="auto", help="auto keeps the GGUF's Q4_1 blocks; float32 dequantizes")
    parser.add_argument("--adaptive", action="store_true", help="NGRAM with --speculative-adaptive")
    parser.add_argument("--kinds", nargs="+", choices=sorted(KINDS), default=list(KINDS), help="which prompt sets")
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
        for engine in (plain, spec):  # captures the shapes it drafts (adaptive lengths may take new ones later)
            engine.generate(chat(WARM_UP), params)
        for kind in args.kinds:
            prompts, target = KINDS[kind]
            t = run_kind(plain, spec, [chat(p) for p in prompts], params, args.repeats)
            rate = t["accepted"] / t["drafted"] if t["drafted"] else 0.0
            report(
                f"{kind} prompts ({len(prompts)}), greedy, up to {args.new_tokens} new tokens, best of {args.repeats}",
                [
                    ("without speculation, end to end", t["tokens"] / t["plain_s"], "tok/s"),
                    ("NGRAM, end to end", t["tokens"] / t["spec_s"], "tok/s"),
                    ("end to end, NGRAM / without", t["plain_s"] / t["spec_s"], "x"),
                    ("without speculation, after the first token", t["decode_tokens"] / t["plain_decode_s"], "tok/s"),
                    ("NGRAM, after the first token", t["decode_tokens"] / t["spec_decode_s"], "tok/s"),
                    ("NGRAM acceptance rate (accepted / drafted)", rate, ""),
                    ("NGRAM tokens per decode step", t["tokens"] / max(t["verify"], 1), ""),
                    ("share of the answer from accepted drafts", t["accepted"] / max(t["tokens"], 1), ""),
                ],
                ("after the first token, NGRAM / without", t["plain_decode_s"] / t["spec_decode_s"], target),
            )


if __name__ == "__main__":
    main()
