"""The oracle: every op forced to its reference, capture off, the prefix cache off, and each
request run alone; and the comparison a target's greedy outputs must pass.

Greedy outputs must be token-identical to the oracle's, except where the first differing token is
a near tie in the oracle: its top two logprobs within `NEAR_TIE_LOGPROB` of each other, where
rounding differences between kernels may legitimately pick either. Past that token the two
continuations are unrelated, so nothing after it is compared; every near tie is reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang.ci.suites.schedule_fuzz.workload import RequestSpec
from sglang.runtime.engine import Engine

NEAR_TIE_LOGPROB = 1e-3
"""fp32 kernels that sum in another order move logprobs by about 1e-5; a gap under 1e-3 may flip."""

ORACLE_ARGS: dict[str, Any] = {
    "device": "cpu",
    "reference_ops": True,
    "disable_cuda_graph": True,
    "disable_radix_cache": True,
    "disable_hybrid_swa_memory": True,  # windowed layers keep every token: no window pool to share a bug with
    "cpu_threads": 1,
    "log_level": "warning",
}


@dataclass(frozen=True)
class Verdict:
    """`ok` when the output matches the oracle; `near_tie` when it matched only up to a near
    tie; `detail` says where and by how much."""

    ok: bool
    detail: str = ""
    near_tie: bool = False


class Oracle:
    """Answers for greedy requests, computed once each (targets share them) on its own engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.answers: dict[RequestSpec, dict[str, Any]] = {}

    def answer(self, spec: RequestSpec) -> dict[str, Any]:
        key = spec.oracle_request()
        if key not in self.answers:
            self.answers[key] = self.engine.generate(**key.generate_kwargs())
        return self.answers[key]


def compare(output: dict[str, Any], reference: dict[str, Any], complete: bool) -> Verdict:
    """Judges one greedy sequence against the oracle's. `complete`: the sequence finished (else
    it is a stream the client closed early, which must be a prefix of the oracle's)."""
    ids, ref_ids = output["output_ids"], reference["output_ids"]
    differ = next((i for i, (a, b) in enumerate(zip(ids, ref_ids)) if a != b), None)
    if differ is None:
        if not complete:
            return Verdict(len(ids) <= len(ref_ids), f"{len(ids)} tokens before the close, oracle {len(ref_ids)}")
        if len(ids) != len(ref_ids):
            return Verdict(False, f"{len(ids)} tokens, oracle {len(ref_ids)} (equal up to the shorter)")
        ours, theirs = output["meta_info"]["finish_reason"], reference["meta_info"]["finish_reason"]
        return Verdict(ours == theirs, f"finish_reason {ours}, oracle {theirs}")
    (best, best_id), (second, second_id) = reference["meta_info"]["output_top_logprobs"][differ][:2]
    gap = best - second
    where = (
        f"output token {differ}: {ids[differ]}, oracle {ref_ids[differ]} (its top two: {best_id} {best:.6f}, "
        f"{second_id} {second:.6f}; gap {gap:.2e})"
    )
    if gap <= NEAR_TIE_LOGPROB:
        return Verdict(True, f"near tie at {where}", near_tie=True)
    return Verdict(False, where)
