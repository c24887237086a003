"""Hypothesis strategies for the schedule fuzzer's workloads.

A workload draws one or two prefix roots; each request's prompt is a root's prefix followed by
its own suffix (an empty suffix makes a fork: the same prefix submitted as several requests), so
the radix cache shares, splits and evicts. Around that: `n > 1`, greedy and sampled requests,
stop strings and regexes, JSON-schema constraints, logprobs, streams closed early (aborts) and
`max_new_tokens` 0, and on a target serving adapters, LoRA adapters mixed with the base model
(one prompt prefix under several adapters, so the cache must keep them apart). Token ids come
from a seeded generator, so a prompt shrinks by its length and seed rather than token by token.
Some roots repeat a short motif: a speculative target's NGRAM drafts from them whatever the
fuzz model answers, so every run's verify steps carry drafts, even on the small budgets.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from hypothesis import strategies as st

from sglang.ci.suites.schedule_fuzz.fuzz_model import FIRST_PLAIN_TOKEN, FUZZ_SHAPE
from sglang.ci.suites.schedule_fuzz.workload import RequestSpec, Workload

STOP_STRINGS = ("e", "ing", " a", "\n", "ion")
"""Pieces common in the text of random BPE tokens, so stop strings do match now and then."""
STOP_REGEXES = (r"[0-9]", r"[A-Z][a-z]", r"\s\s")
JSON_SCHEMAS = tuple(
    json.dumps(schema)
    for schema in (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
        {"type": "string", "maxLength": 8},
    )
)


@dataclass(frozen=True)
class WorkloadBudget:
    """How big a drawn workload may be. Invariant: a prompt plus its outputs fits the fuzz
    model's context (`max_prompt_len + max_new_tokens <= max_position_embeddings`)."""

    max_requests: int
    max_prompt_len: int
    max_new_tokens: int
    max_n: int

    def __post_init__(self) -> None:
        context = FUZZ_SHAPE["max_position_embeddings"]
        if self.max_prompt_len + self.max_new_tokens > context:
            raise ValueError(f"{self} does not fit the fuzz model's {context}-token context")


FULL = WorkloadBudget(max_requests=8, max_prompt_len=600, max_new_tokens=48, max_n=4)
"""Compiled and host backends: eight requests of up to 600 prompt tokens overflow a 2048-token pool
(eviction, retraction) and a 128-token chunk (chunked prefill)."""
INTERPRETED = WorkloadBudget(max_requests=3, max_prompt_len=40, max_new_tokens=6, max_n=2)
"""Triton's interpreter runs each kernel program in Python (seconds per step): small workloads."""


def tokens(length: int, seed: int, period: int | None = None) -> tuple[int, ...]:
    """`length` seeded token ids; with `period`, its first `period` ids repeated."""
    rng = random.Random(seed)
    drawn = [rng.randrange(FIRST_PLAIN_TOKEN, FUZZ_SHAPE["vocab_size"]) for _ in range(min(length, period or length))]
    return tuple(drawn[i % len(drawn)] for i in range(length))


@st.composite
def prompt_roots(draw: st.DrawFn, budget: WorkloadBudget) -> tuple[int, ...]:
    length, seed = draw(st.integers(1, budget.max_prompt_len)), draw(st.integers(0, 2**16))
    return tokens(length, seed, draw(st.none() | st.integers(1, 8)))


@st.composite
def requests(
    draw: st.DrawFn, roots: list[tuple[int, ...]], budget: WorkloadBudget, adapters: tuple[str, ...] = ()
) -> RequestSpec:
    root = draw(st.sampled_from(roots))
    keep = draw(st.integers(0, len(root)))
    suffix = tokens(draw(st.integers(0 if keep else 1, budget.max_prompt_len - keep)), draw(st.integers(0, 2**16)))
    n = draw(st.integers(1, budget.max_n))
    stream = n == 1 and draw(st.booleans())
    return RequestSpec(
        prompt_ids=root[:keep] + suffix,
        max_new_tokens=draw(st.integers(0, budget.max_new_tokens)),
        n=n,
        temperature=draw(st.sampled_from((0.0, 0.0, 0.8))),
        stop=tuple(draw(st.lists(st.sampled_from(STOP_STRINGS), max_size=2, unique=True))),
        stop_regex=draw(st.none() | st.sampled_from(STOP_REGEXES)),
        json_schema=draw(st.none() | st.none() | st.sampled_from(JSON_SCHEMAS)),
        top_logprobs_num=draw(st.none() | st.integers(0, 3)),
        stream=stream,
        abort_after=draw(st.none() | st.integers(1, 3)) if stream else None,
        lora_path=draw(st.sampled_from((None, *adapters))) if adapters else None,
    )


@st.composite
def workloads(draw: st.DrawFn, budget: WorkloadBudget, adapters: tuple[str, ...] = ()) -> Workload:
    """`adapters`: LoRA adapter names the requests draw from (with the base model), or none."""
    roots = draw(st.lists(prompt_roots(budget), min_size=1, max_size=2))
    count = draw(st.integers(1, budget.max_requests))
    return Workload(tuple(draw(requests(roots, budget, adapters)) for _ in range(count)))
