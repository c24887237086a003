"""STANDALONE drafting: a second, smaller model with its own KV pool (no prefix cache) proposes
a chain of greedy tokens that the target then verifies.

Per request the drafter keeps the draft model's KV of a prefix of the request's tokens. A draft
round is `steps` draft-model steps over the whole batch: the first feeds each request's tokens
the draft KV lacks (its prompt on first use, then the tokens the last verify step appended) and
takes its argmax; each further step feeds the previous draft as a decode. Greedy drafts are
point masses, so `acceptance` treats them as NGRAM's. After the target's verify step, the draft
KV of tokens the request did not keep is freed lazily, at the next round: the KV kept is that of
the longest common prefix of what was fed and the request's tokens now.

The draft runs on the target's platform, in the same process, with the kernels bound for the
target (ops are bound once per process); a draft on another platform is not served.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from sglang import ops
from sglang.ops.attention import AttentionInputs
from sglang.ops.selection import OpTable
from sglang.ops.step import StepInputs
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.loader.model_loading import LoadedModel, load_model
from sglang.runtime.memory.token_allocator import PagedTokenAllocator
from sglang.runtime.scheduler.req import Req
from sglang.runtime.server_args import ServerArgs
from sglang.runtime.speculative.config import SpeculativeConfig
from sglang.runtime.speculative.speculator import Draft

logger = logging.getLogger(__name__)


@dataclass
class DraftState:
    """`slots[i]` holds the draft model's KV of `tokens[i]`."""

    tokens: list[int] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)


class DraftModelDrafter:
    free = False

    def __init__(self, runner: ModelRunner, allocator: PagedTokenAllocator, steps: int) -> None:
        self.runner = runner
        self.allocator = allocator
        self.steps = steps
        self.states: dict[str, DraftState] = {}

    def draft(self, reqs: list[Req], max_tokens: list[int]) -> list[Draft]:
        states = [self._synced(req) for req in reqs]
        feeds = [req.fill_ids[len(state.tokens) :] for req, state in zip(reqs, states)]
        drafts: list[list[int]] = [[] for _ in reqs]
        active = list(range(len(reqs)))
        try:
            for step in range(min(self.steps, max(max_tokens))):
                active = [i for i in active if step < max_tokens[i] and self._grow(states[i], len(feeds[i]))]
                if not active:
                    break
                tokens = self._forward([states[i] for i in active], [feeds[i] for i in active])
                for i, token in zip(active, tokens):
                    states[i].tokens.extend(feeds[i])
                    drafts[i].append(token)
                    feeds[i] = [token]
        except Exception:  # a failed draft round costs its drafts, never the target's step
            logger.exception("a draft model step failed; the batch decodes without drafts")
            for req in reqs:
                self.release(req)
            return [Draft([]) for _ in reqs]
        return [Draft(tokens) for tokens in drafts]

    def release(self, req: Req) -> None:
        state = self.states.pop(req.rid, None)
        if state is not None and state.slots:
            self.allocator.free(state.slots)

    def forget(self) -> None:
        """Nothing to drop: a request's draft KV goes when it finishes (`release`)."""

    def _synced(self, req: Req) -> DraftState:
        """`req`'s state, cut to the longest common prefix of what was fed and its tokens (and
        short of its last token, which the next step feeds)."""
        state = self.states.setdefault(req.rid, DraftState())
        fill = req.fill_ids
        keep = 0
        limit = min(len(state.tokens), len(fill) - 1)
        while keep < limit and state.tokens[keep] == fill[keep]:
            keep += 1
        if keep < len(state.slots):
            self.allocator.free(state.slots[keep:])
        del state.tokens[keep:], state.slots[keep:]
        return state

    def _grow(self, state: DraftState, count: int) -> bool:
        """Allocates `count` slots after the state's; False (nothing allocated) when full."""
        last = state.slots[-1] if state.slots else None
        slots = self.allocator.alloc_extend(last, count)
        if slots is None:
            return False
        state.slots.extend(slots.tolist())
        return True

    def _forward(self, states: list[DraftState], feeds: list[list[int]]) -> list[int]:
        """One draft-model step: each state's slots already include its feed's; the argmax after each."""
        ids, positions, rows = [], [], []
        for state, feed in zip(states, feeds):
            start = len(state.tokens)
            ids.extend(feed)
            positions.extend(range(start, start + len(feed)))
            rows.append(len(ids) - 1)
        attention = AttentionInputs(
            seq_lens=tuple(len(s.slots) for s in states),
            extend_lens=tuple(len(f) for f in feeds),
            kv_slots=torch.tensor([slot for s in states for slot in s.slots], dtype=torch.int64),
        )
        step = StepInputs(
            input_ids=torch.tensor(ids, dtype=torch.long),
            positions=torch.tensor(positions, dtype=torch.long),
            attention=attention,
            logit_rows=torch.tensor(rows, dtype=torch.long),
        )
        return ops.argmax(self.runner.forward(step)).tolist()


def load_draft(args: ServerArgs, config: SpeculativeConfig, target: LoadedModel, kv_tokens: int) -> DraftModelDrafter:
    """The draft model of `config` on the target's platform, with a pool of `kv_tokens` tokens;
    refused (ValueError) where it could not draft for this target."""
    if args.tp_size > 1:
        raise ValueError("--speculative-algorithm STANDALONE is served with --tp-size 1 only")
    draft = load_model(args.replace(model_path=config.draft_model_path, tokenizer_path=None), target.platform)
    if draft.config.vocab_size > target.config.vocab_size:
        raise ValueError(
            f"the draft model's vocabulary ({draft.config.vocab_size}) is larger than the target's "
            f"({target.config.vocab_size}): they must share the tokenizer"
        )
    if _kernels(draft.op_table) != _kernels(target.op_table):
        raise ValueError(
            "the draft model needs other kernels than the target (ops are bound once per process): "
            f"draft {sorted(_kernels(draft.op_table) - _kernels(target.op_table))}"
        )
    allocator = PagedTokenAllocator(kv_tokens + 1, 1)
    runner = ModelRunner(draft.model, target.platform, allocator.num_slots)
    return DraftModelDrafter(runner, allocator, config.num_steps)


def _kernels(table: OpTable) -> set[tuple[str, str]]:
    return {(op["op"], op["candidate"]) for op in table.as_dict()["ops"]}
