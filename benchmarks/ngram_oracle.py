"""How fast NGRAM could possibly be on bench_speculative's prompts: drafters with perfect foresight.

Issue 24 asks NGRAM for 1.8x over plain decoding on prompts whose answers repeat them. What a
drafter can gain is bounded by two things this script measures in one run, on the embedded model:
- the cost of a verify step of `d` drafts, as a multiple of a one-row decode step: decode steps
  of `d + 1` concurrent requests are timed (a verify step replays the same decode buckets, each
  drafted token one more row), `cost(d) = step(d + 1) / step(1)`;
- which drafts could be accepted: the greedy answers are generated once, then replayed position
  by position over the request's own `NgramIndex` (prompt and answer so far, as NGRAM sees it).
Two oracles draft, at each position, exactly the tokens that will be accepted, and nothing that
will not (no real drafter does better than its oracle):
- chain: the accepted prefix of the draft NGRAM's index proposes (its longest match);
- tree: the longest accepted prefix over every continuation of every earlier occurrence of the
  last token (any tree of drafts from this index, its right branch known in advance).
Each reports tokens per unit of step cost, plain decoding being 1.0: the highest ratio of NGRAM
over plain decoding that drafting from this index can reach at this machine's row cost.

    PYTHONPATH=. .venv/bin/python benchmarks/ngram_oracle.py [--new-tokens 96] [--rows 8]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from bench_speculative import KINDS
from runtime_common import engine_threads, hf_tokenizer, report

from sglang.runtime.engine import Engine
from sglang.runtime.speculative.ngram import NgramIndex, NgramLimits

LIMITS = NgramLimits(min_window=1, max_window=12, max_depth=18)
"""Upstream's NGRAM defaults (`--speculative-ngram-{min,max}-match-window-size`, `-max-trie-depth`)."""
MAX_DRAFTS = 11
"""Upstream's `--speculative-num-draft-tokens` 12, less the verified token."""
STEP_TOKENS = 48
ROUNDS = 2
"""Each step size is timed this many times, the fastest kept (the machine is shared)."""


def accepted(drafted: Sequence[int], answer: Sequence[int]) -> int:
    count = 0
    while count < min(len(drafted), len(answer)) and drafted[count] == answer[count]:
        count += 1
    return count


def chain_oracle(index: NgramIndex, context: list[int], rest: Sequence[int]) -> int:
    drafted, _ = index.draft(context, MAX_DRAFTS, LIMITS, exclude_tail=True)
    return accepted(drafted, rest)


def tree_oracle(index: NgramIndex, context: list[int], rest: Sequence[int]) -> int:
    earlier = index.positions.get(context[-1], [])[:-1]  # the last is the context's own tail
    return max((accepted(index.tokens[pos + 1 : pos + 1 + MAX_DRAFTS], rest) for pos in earlier), default=0)


ORACLES = (("chain", chain_oracle), ("tree", tree_oracle))


def replay(prompt: list[int], answer: list[int], oracle: Callable[..., int], cost: Callable[[int], float]) -> float:
    """Summed step cost of decoding `answer` after its first token, drafting what `oracle` says."""
    total, position = 0.0, 1
    while position < len(answer):
        context = prompt + answer[:position]
        index = NgramIndex()
        index.extend(context)
        rest = answer[position:]
        drafts = min(oracle(index, context, rest), len(rest) - 1)
        total += cost(drafts)
        position += drafts + 1
    return total


def step_seconds(engine: Engine, prompts: list[str]) -> float:
    """Seconds per decode step with `len(prompts)` requests decoding together (median request)."""
    params = {"temperature": 0.0, "max_new_tokens": STEP_TOKENS, "ignore_eos": True}
    outputs = engine.generate(prompts, params)
    steps = sorted((o["meta_info"]["e2e_latency"] - o["meta_info"]["ttft"]) / (STEP_TOKENS - 1) for o in outputs)
    return steps[len(steps) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--rows", type=int, default=8, help="largest step timed; beyond it cost grows linearly")
    args = parser.parse_args()
    tokenizer = hf_tokenizer()

    def chat(question: str) -> str:
        messages = [{"role": "user", "content": question}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    with Engine(device="cpu", cpu_threads=engine_threads(), log_level="warning", max_total_tokens=4096) as engine:
        questions = [question for prompts, _ in KINDS.values() for question in prompts]
        step_seconds(engine, [chat(q) for q in questions[: args.rows]])  # captures every bucket timed below
        steps = [
            min(step_seconds(engine, [chat(q) for q in questions[:rows]]) for _ in range(ROUNDS))
            for rows in range(1, args.rows + 1)
        ]
        answers = {
            kind: [
                (
                    ids,
                    engine.generate(
                        input_ids=ids, sampling_params={"temperature": 0.0, "max_new_tokens": args.new_tokens}
                    )["output_ids"],
                )
                for ids in (tokenizer.encode(chat(p)) for p in prompts)
            ]
            for kind, (prompts, _) in KINDS.items()
        }
    relative = [s / steps[0] for s in steps]
    per_row = (relative[-1] - relative[0]) / (len(relative) - 1)

    def cost(drafts: int) -> float:
        return relative[drafts] if drafts < len(relative) else relative[-1] + per_row * (drafts + 1 - len(relative))

    print(f"\nverify step cost, a one-row decode step ({steps[0] * 1e3:.2f} ms) = 1")
    print("  " + ", ".join(f"{d} drafts {relative[d]:.2f}" for d in range(1, len(relative))))
    print(f"  per drafted row, on average {per_row:.2f}")
    for kind, pairs in answers.items():
        tokens = sum(len(answer) - 1 for _, answer in pairs)
        ratios = {name: tokens / sum(replay(p, a, oracle, cost) for p, a in pairs) for name, oracle in ORACLES}
        report(
            f"{kind} prompts ({len(pairs)}), {tokens} tokens after the first, oracles' NGRAM / plain",
            [("chain oracle", ratios["chain"], "x")],
            ("tree oracle (the bound)", ratios["tree"], KINDS[kind][1]),
        )


if __name__ == "__main__":
    main()
