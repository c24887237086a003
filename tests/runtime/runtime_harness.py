"""Helpers for runtime tests on the embedded model (SmolLM2-135M-Instruct): prompts, requests
as the tokenizer manager sends them, and an in-process scheduler driven step by step.

Test modules import from here (`from .runtime_harness import ...`), not from conftest.py, whose
fixtures pytest hands them by name.

The device and the cpu thread count are the launcher's (`sglang.ci.servers`: `$SGLANG_TEST_DEVICE`,
else cpu; `$SGLANG_CPU_THREADS`, else one), so in-process runtimes and servers run alike.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from sglang.ci.servers import CPU_THREADS
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.memory.token_allocator import PagedTokenAllocator
from sglang.runtime.processes.detokenizer import Detokenizer
from sglang.runtime.processes.messages import GenerateRequest, LogprobRequest, ReadyInfo, TextUpdate, TokenBatch
from sglang.runtime.requests.meta_info import MetaInfo
from sglang.runtime.requests.sampling_params import SamplingParams
from sglang.runtime.scheduler.scheduler import Scheduler

SHARED_KV_TOKENS = 8192
QUESTION = "What is the capital of France?"
CORPUS = (
    "The river wound through the valley past old mills and stone bridges. Farmers brought grain to "
    "the market every Thursday, and the baker on the square sold bread before sunrise. In winter the "
    "snow closed the mountain pass, so the village lived on what it had stored in autumn: apples, "
    "potatoes, smoked fish and barrels of cider. Children learned to read in the one-room school, "
    "where the teacher kept a map of the world on the wall and a jar of coloured pencils on her desk. "
    "Travellers were rare, and each one was asked for news of the cities beyond the hills. "
)


INFO = ReadyInfo(
    model_path="m",
    tokenizer_path="m",
    chat_template=None,
    architectures=("LlamaForCausalLM",),
    model_type="llama",
    context_length=64,
    vocab_size=1,
    max_total_tokens=64,
    device="cpu",
    dtype="float32",
    eos_token_ids=(0,),
    bos_token=None,
    eos_token=None,
    op_table={},
)
"""What a model-less tokenizer manager is told (a 64-token context, a one-token vocabulary)."""


def chat_prompt(tokenizer: Any, question: str = QUESTION) -> list[int]:
    """The ChatML prompt of one user turn, as token ids (the model's own template)."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )
    return tokenizer.encode(text, add_special_tokens=False)


def corpus_ids(tokenizer: Any, length: int, offset: int = 0) -> list[int]:
    """`length` tokens of English text starting `offset` tokens into a repeated paragraph."""
    ids = tokenizer.encode(CORPUS, add_special_tokens=False)
    repeats = (offset + length) // len(ids) + 1
    return (ids * repeats)[offset : offset + length]


@dataclass
class Outcome:
    """Everything a request produced: its token updates folded together, and the text the
    detokenizer made of them."""

    rid: str
    output_ids: list[int] = field(default_factory=list)
    finish_reason: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    texts: list[str] = field(default_factory=list)
    """The cumulative text of every update (one per step for a streaming request)."""
    info: MetaInfo = field(default_factory=lambda: MetaInfo(LogprobRequest(return_logprob=True, return_entropy=True)))
    """Folds the updates' meta as the tokenizer manager does (every logprob field included)."""

    @property
    def finished_by(self) -> str | None:
        return None if self.finish_reason is None else self.finish_reason["type"]


_rids = itertools.count()


def make_request(
    input_ids: list[int],
    rid: str | None = None,
    logprobs: LogprobRequest | None = None,
    stream: bool = False,
    **params: Any,
) -> GenerateRequest:
    """A validated, normalized request as the tokenizer manager would send it (greedy and
    8 new tokens unless told otherwise)."""
    params = {"temperature": 0.0, "max_new_tokens": 8, **params}
    sampling = SamplingParams.from_dict(params)
    sampling.validate(49152)
    return GenerateRequest(
        rid or f"r{next(_rids)}", list(input_ids), sampling.normalize(), logprobs or LogprobRequest(), stream=stream
    )


def run_requests(
    scheduler: Scheduler,
    detokenizer: Detokenizer,
    requests: Iterable[GenerateRequest],
    between_steps: Callable[[int, Scheduler], None] | None = None,
    max_steps: int = 2000,
) -> dict[str, Outcome]:
    """Adds `requests`, steps the scheduler until it has no work, and returns each request's
    outcome by rid. `between_steps(step_index, scheduler)` may add or abort requests."""
    outcomes: dict[str, Outcome] = {}
    for request in requests:
        outcomes[request.rid] = Outcome(request.rid)
        scheduler.add_request(request)
    for index in itertools.count():
        if between_steps is not None:
            between_steps(index, scheduler)
        if not scheduler.has_work:
            break
        assert index < max_steps, "the scheduler did not finish its work"
        updates = scheduler.step()
        if updates:
            for token_update, text_update in zip(updates, detokenizer.process(TokenBatch(updates)).updates):
                outcome = outcomes.setdefault(token_update.rid, Outcome(token_update.rid))
                _fold(outcome, token_update.new_token_ids, text_update)
    return outcomes


def _fold(outcome: Outcome, new_ids: list[int], text: TextUpdate) -> None:
    assert outcome.finish_reason is None, f"{outcome.rid} got an update after its final one"
    outcome.output_ids.extend(new_ids)
    outcome.finish_reason = None if text.finish_reason is None else text.finish_reason.to_json()
    if text.meta is not None:
        outcome.info.add(text.meta)
        outcome.meta = outcome.info.to_json(outcome.rid, text.finish_reason)
    outcome.text = text.text
    outcome.texts.append(text.text)


@dataclass
class Runtime:
    """The session's model behind an in-process scheduler, with helpers to drive it."""

    scheduler: Scheduler
    info: ReadyInfo
    tokenizer: Any
    detokenizer: Detokenizer

    def run(self, requests: Iterable[GenerateRequest], **kwargs: Any) -> dict[str, Outcome]:
        """Runs `requests` together on the session scheduler (see `run_requests`)."""
        return run_requests(self.scheduler, self.detokenizer, requests, **kwargs)

    def run_on(self, scheduler: Scheduler, requests: Iterable[GenerateRequest], **kwargs: Any) -> dict[str, Outcome]:
        """Runs `requests` together on another scheduler (see `make_scheduler`)."""
        return run_requests(scheduler, Detokenizer(self.tokenizer), requests, **kwargs)

    def one(self, input_ids: list[int], **params: Any) -> Outcome:
        """Runs one request alone (`logprobs=`, `stream=` and sampling parameters as keywords)."""
        request = make_request(input_ids, **params)
        return self.run([request])[request.rid]

    def make_scheduler(self, **changes: Any) -> Scheduler:
        """Another scheduler around the same loaded model, with its own KV pool and `changes`
        to the server arguments (e.g. `max_total_tokens`, `chunked_prefill_size`)."""
        base = self.scheduler
        args = base.args.replace(**changes)
        tokens = args.max_total_tokens or base.capacity
        allocator = PagedTokenAllocator(tokens // args.page_size + 1, args.page_size)
        runner = ModelRunner(base.runner.model, base.runner.platform, allocator.num_slots)
        return Scheduler(runner, allocator, args, base.tail_text, base.eos_token_ids, base.context_length, base.grammar)


@contextlib.contextmanager
def model_threads() -> Iterator[None]:
    """Runs the body on `CPU_THREADS` torch threads, restoring the count afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(CPU_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def token_ids_of(tokenizer: Any, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)
