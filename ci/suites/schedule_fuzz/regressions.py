"""Fixed schedules every fuzzer target runs: past crashes and the fuzzer's shrunk finds.

Each is a sequence of workloads run one after the other on the target's engine (2048-token pool,
128-token chunks, see `targets`) and checked like any fuzzed workload.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang.ci.suites.schedule_fuzz.strategies import FULL, INTERPRETED, WorkloadBudget, tokens
from sglang.ci.suites.schedule_fuzz.workload import RequestSpec, Workload

PROMPT_420 = tokens(420, seed=22)
N8_NEW_TOKENS = 3
"""Past the first token (each copy's extend step), two decode steps of eight rows whose slots sum
to 8 x 421 > 2048: the step that crashed. Each token costs seconds in Triton's interpreter."""
POOL_PRESSURE_NEW_TOKENS = 240
"""300 + 240 slots a request: four alive at once outgrow the pool, and admission (prompt plus a 30%
reserve of the output, `runtime/scheduler/admission.py`) lets five in together."""
NGRAM_NEW_TOKENS = 16
"""Six tokens past the output's first repeat (outputs 7-11 are 41847 46743 41847 46743 41847 under
transformers): room for drafts of several tokens."""


@dataclass(frozen=True)
class Regression:
    """A named fixed schedule. `budgets`: the workload budgets of the targets that run it (a
    target whose budget is not listed skips it, saying so); `retracts`: the schedule must make
    the scheduler retract at least one request (so the pool really is under pressure)."""

    name: str
    workloads: tuple[Workload, ...]
    why: str
    budgets: tuple[WorkloadBudget, ...] = (FULL, INTERPRETED)
    retracts: bool = False
    drafts: bool = False
    """On a speculative target, the schedule must verify drafted tokens (its prompts repeat)."""


REGRESSIONS: tuple[Regression, ...] = (
    Regression(
        "n8-shared-prompt",
        (Workload((RequestSpec(PROMPT_420, max_new_tokens=N8_NEW_TOKENS, n=8),)),),
        "issue 22: n=8 over a ~420-token prompt on a 2048-token pool killed the cpu capture path (the decode "
        "rows share the prompt's slots, so their KV slots summed past the captured buffers; fixed in db3844e)",
    ),
    Regression(
        "n8-shared-prompt-sampled",
        (Workload((RequestSpec(PROMPT_420, max_new_tokens=N8_NEW_TOKENS, n=8, temperature=0.8),)),),
        "the same schedule as issue 22's report (sampled, eight different continuations of one prompt); "
        "the interpreted targets run only the greedy one: the slot sharing that crashed is the same",
        budgets=(FULL,),
    ),
    Regression(
        "pool-pressure",
        (Workload(tuple(RequestSpec(tokens(300, seed=s), max_new_tokens=POOL_PRESSURE_NEW_TOKENS) for s in range(6))),),
        "six 300-token prompts decoding 240 tokens each outgrow the 2048-token pool: retraction and resume. "
        "Any four of them alive at once need 2160 slots, so the pool runs short however the requests' "
        "arrivals and steps interleave (at 96 tokens all six had to be alive at once, and one CI run "
        "retracted nothing; at 64 a target that drafts for itself finished the first requests before "
        "the last were prefilled)",
        budgets=(FULL,),
        retracts=True,
    ),
    Regression(
        "ngram-output-cycle",
        (
            Workload(
                (
                    RequestSpec(tokens(3, seed=32) * 5, max_new_tokens=NGRAM_NEW_TOKENS),
                    RequestSpec(tokens(3, seed=32) * 5, max_new_tokens=NGRAM_NEW_TOKENS, top_logprobs_num=2),
                )
            ),
        ),
        "issue 24: the fuzz model's greedy output of this prompt falls into a two-token cycle by its tenth token, "
        "so NGRAM drafts from the output itself and every speculative target runs verify steps (with logprobs)",
        drafts=True,
    ),
)
