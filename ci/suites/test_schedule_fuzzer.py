"""The differential schedule fuzzer (issue 22 item 4) on every backend this machine runs.

Per target (see `schedule_fuzz.targets`) one engine serves one tiny fuzz model (a Llama, DeepSeek V2
or gpt-oss, `schedule_fuzz.fuzz_model`) and is held to that model's oracle; hypothesis draws
workloads (`schedule_fuzz.strategies`) that are submitted concurrently, and each must pass
`check_workload`: no exception escapes, every request finishes exactly once, greedy sequences
equal the oracle's (every op its reference, capture off, each request alone) up to reported near
ties, and the KV pool is whole once the scheduler is idle. One target serves three LoRA adapters
over two device slots, and its workloads mix them with the base model (the oracle serves them
too). The default run takes each target's `examples` (derandomized, so CI draws the same
workloads every time); `-m slow` takes `slow_examples` with fresh randomness. Fixed regression
schedules run on every target too.

Each fuzz test prints its target's example count, requests, near ties, retractions and seconds.
"""

from __future__ import annotations

import functools
import importlib.util
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from sglang.ci.suites.lora_adapters import ADAPTER_NAMES, build_adapters, lora_flags
from sglang.ci.suites.schedule_fuzz.checker import check_workload
from sglang.ci.suites.schedule_fuzz.driver import RequestOutcome
from sglang.ci.suites.schedule_fuzz.fuzz_model import FUZZ_MODELS, LLAMA, build_fuzz_model
from sglang.ci.suites.schedule_fuzz.invariants import delivery_problems, kv_problems
from sglang.ci.suites.schedule_fuzz.oracle import NEAR_TIE_LOGPROB, ORACLE_ARGS, Oracle, compare
from sglang.ci.suites.schedule_fuzz.regressions import REGRESSIONS, Regression
from sglang.ci.suites.schedule_fuzz.strategies import workloads
from sglang.ci.suites.schedule_fuzz.targets import POOL_TOKENS, FuzzTarget, fuzz_targets, started
from sglang.ci.suites.schedule_fuzz.workload import RequestSpec, Workload
from sglang.runtime.engine import Engine

MANY_EXAMPLES = 10
"""Examples from which a speculative target must have verified drafts (the slow run's count)."""


@dataclass
class FuzzStats:
    examples: int = 0
    requests: int = 0
    sequences: int = 0
    near_ties: list[str] = field(default_factory=list)

    def add(self, workload: Workload, near_ties: list[str]) -> None:
        self.examples += 1
        self.requests += len(workload.requests)
        self.sequences += workload.sequences()
        self.near_ties += near_ties


class FuzzModels:
    """Each fuzz model's folder and the Llama's LoRA adapters, built on first use."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._paths: dict[str, Path] = {}

    def path(self, name: str) -> Path:
        if name not in self._paths:
            self._paths[name] = build_fuzz_model(self.root / name, FUZZ_MODELS[name].spec)
        return self._paths[name]

    @functools.cached_property
    def adapters(self) -> dict[str, Path]:
        """The Llama's adapters by name; none where peft (which makes them) is absent."""
        if importlib.util.find_spec("peft") is None:
            return {}
        llama = self.path(LLAMA.name)
        return build_adapters(llama, llama.parent / "adapters")

    def lora_args(self, model: str) -> dict[str, object]:
        """Engine arguments serving the adapters where `model` is the Llama and peft is here."""
        return lora_flags(self.adapters) if model == LLAMA.name and self.adapters else {}


class Oracles:
    """The oracle of one model (and oracle settings) at a time. Targets are listed model by model
    and pytest runs a module-scoped parameter's tests together, so each oracle engine starts once."""

    def __init__(self, models: FuzzModels) -> None:
        self.models = models
        self.key: tuple[str, str] | None = None
        self.oracle: Oracle | None = None

    def get(self, target: FuzzTarget) -> Oracle:
        key = (target.model, repr(sorted(target.oracle_args.items())))
        if self.oracle is None or key != self.key:
            self.close()
            # Serving the adapters changes nothing for base requests: their rows add exact zeros.
            path, lora = self.models.path(target.model), self.models.lora_args(target.model)
            engine = Engine(str(path), max_total_tokens=POOL_TOKENS, **ORACLE_ARGS, **target.oracle_args, **lora)
            self.key, self.oracle = key, Oracle(engine)
        return self.oracle

    def close(self) -> None:
        if self.oracle is not None:
            self.oracle.engine.shutdown()
        self.key, self.oracle = None, None


@pytest.fixture(scope="module")
def fuzz_models(tmp_path_factory: pytest.TempPathFactory) -> FuzzModels:
    return FuzzModels(tmp_path_factory.mktemp("schedule-fuzz"))


@pytest.fixture(scope="module")
def oracles(fuzz_models: FuzzModels) -> Iterator[Oracles]:
    store = Oracles(fuzz_models)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(
    scope="module",
    params=[pytest.param(t, id=t.id, marks=[pytest.mark.slow] if t.slow_only else []) for t in fuzz_targets()],
)
def target_engine(request: pytest.FixtureRequest, fuzz_models: FuzzModels) -> Iterator[tuple[FuzzTarget, Engine]]:
    """One engine per target, shared by its fuzz and regression tests (pytest groups them)."""
    target: FuzzTarget = request.param
    reason = target.unavailable()
    if reason is not None:
        pytest.skip(f"{target.id}: {reason}")
    lora = fuzz_models.lora_args(target.model) if target.lora else {}
    with started(target, fuzz_models.path(target.model), **lora) as engine:
        yield target, engine


@pytest.fixture
def oracle(target_engine: tuple[FuzzTarget, Engine], oracles: Oracles) -> Oracle:
    """The oracle of the model the target serves, with the target's oracle settings."""
    return oracles.get(target_engine[0])


def fuzz(target: FuzzTarget, engine: Engine, oracle: Oracle, examples: int, derandomize: bool) -> None:
    stats = FuzzStats()
    started_at = time.perf_counter()
    before = engine.get_server_info()

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=derandomize,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(workload=workloads(target.budget, ADAPTER_NAMES if target.lora else ()))
    def run(workload: Workload) -> None:
        near_ties, _ = check_workload(engine, oracle, workload)
        stats.add(workload, near_ties)

    run()
    after = engine.get_server_info()
    accepted = after["spec_accepted_tokens"] - before["spec_accepted_tokens"]
    print(
        f"\nschedule fuzzer on {target.id}: {stats.examples} examples, {stats.requests} requests, "
        f"{stats.sequences} sequences, {after['retractions'] - before['retractions']} retractions, "
        f"{accepted} drafted tokens accepted, "
        f"{after['host_hit_tokens'] - before['host_hit_tokens']} tokens from the host tier, "
        f"{after['storage_hit_tokens'] - before['storage_hit_tokens']} tokens from the storage tier, "
        f"{len(stats.near_ties)} near ties, {time.perf_counter() - started_at:.0f} s"
    )
    if "speculative_algorithm" in target.engine_args and stats.examples >= MANY_EXAMPLES:
        # The default run's two examples may draft nothing (short random outputs); with many, verify
        # steps must have run. tests/runtime/test_speculative.py checks accepted runs
        # deterministically in every run.
        drafted = after["spec_draft_tokens"] - before["spec_draft_tokens"]
        assert drafted > 0, f"{target.id}: no drafted token was verified, so no verify step was checked"
    for line in stats.near_ties:
        print(f"  near tie {line}")
    assert stats.examples == examples, f"hypothesis ran {stats.examples} of {examples} examples"


def test_schedule_fuzzer(target_engine: tuple[FuzzTarget, Engine], oracle: Oracle) -> None:
    target, engine = target_engine
    fuzz(target, engine, oracle, target.examples, derandomize=True)


@pytest.mark.slow
def test_schedule_fuzzer_long(target_engine: tuple[FuzzTarget, Engine], oracle: Oracle) -> None:
    target, engine = target_engine
    fuzz(target, engine, oracle, target.slow_examples, derandomize=False)


@pytest.mark.parametrize("regression", [pytest.param(r, id=r.name) for r in REGRESSIONS])
def test_regression_schedule(target_engine: tuple[FuzzTarget, Engine], oracle: Oracle, regression: Regression) -> None:
    target, engine = target_engine
    if target.lora:
        pytest.skip("regression schedules carry no adapters: the targets without LoRA run them")
    if target.budget not in regression.budgets:
        pytest.skip(f"{regression.name} is too large for {target.id}'s budget ({target.budget})")
    before = engine.get_server_info()
    for workload in regression.workloads:
        near_ties, info = check_workload(engine, oracle, workload)
        for line in near_ties:
            print(f"\n{target.id} {regression.name}: near tie {line}")
    if regression.retracts:
        assert info["retractions"] > before["retractions"], f"{regression.name} retracted nothing: {info}"
    if regression.drafts and "speculative_algorithm" in target.engine_args:
        drafted = info["spec_draft_tokens"] - before["spec_draft_tokens"]
        assert drafted > 0, f"{target.id}: {regression.name} verified no drafted token"
        print(f"\n{target.id} {regression.name}: {drafted} drafted tokens verified")


# The judges themselves, on made-up outputs: each rule must be able to fail.


def _output(ids: list[int], finish: dict | None = None, top: list | None = None) -> dict:
    return {"output_ids": ids, "meta_info": {"finish_reason": finish, "output_top_logprobs": top}}


LENGTH = {"type": "length"}


def test_compare_excuses_only_near_ties() -> None:
    close = [[(-0.5, 7), (-0.5 - NEAR_TIE_LOGPROB / 2, 9)]] * 2
    far = [[(-0.5, 7), (-2.0, 9)]] * 2
    assert compare(_output([7, 7], LENGTH), _output([7, 7], LENGTH, far), complete=True).ok
    tie = compare(_output([7, 9], LENGTH), _output([7, 7], LENGTH, close), complete=True)
    assert tie.ok and tie.near_tie and "output token 1" in tie.detail
    assert not compare(_output([7, 9], LENGTH), _output([7, 7], LENGTH, far), complete=True).ok
    assert not compare(_output([7], LENGTH), _output([7, 7], LENGTH, far), complete=True).ok
    assert compare(_output([7]), _output([7, 7], LENGTH, far), complete=False).ok, "a closed stream is a prefix"


def test_delivery_rules_catch_double_and_missing_finishes() -> None:
    spec = RequestSpec((20, 21), max_new_tokens=2, stream=True)
    good = RequestOutcome(spec, [_output([5, 6], LENGTH)], [_output([5]), _output([5, 6], LENGTH)])
    assert delivery_problems(good) == []
    twice = RequestOutcome(spec, [_output([5, 6], LENGTH)], [_output([5], LENGTH), _output([5, 6], LENGTH)])
    assert delivery_problems(twice)
    plain = RequestOutcome(RequestSpec((20,), max_new_tokens=1, n=2), [_output([5], LENGTH)])
    assert delivery_problems(plain) == ["1 outputs for n=2"]


def test_kv_accounting_catches_lost_and_locked_slots() -> None:
    whole = {"kv_tokens_free": 2000, "kv_tokens_cached": 48, "kv_tokens_total": 2048, "kv_tokens_evictable": 48}
    assert kv_problems(whole) == []
    assert kv_problems({**whole, "kv_tokens_free": 1999})
    assert kv_problems({**whole, "kv_tokens_evictable": 40})
