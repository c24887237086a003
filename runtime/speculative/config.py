"""Speculative decoding's settings, resolved from SGLang's `--speculative-*` flags with upstream's
defaults, or refused at startup with the reason.

Upstream's meaning of the numbers is kept: `num_draft_tokens` is the width of one verify step
(the request's last token plus `num_draft_tokens - 1` drafted ones), and with one draft per step
(`eagle_topk` 1) a chain of `num_steps` drafts needs `num_draft_tokens == num_steps + 1`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sglang.runtime.server_args import ServerArgs

NGRAM = "NGRAM"
STANDALONE = "STANDALONE"
NEEDS_DRAFT_HEADS = ("EAGLE", "EAGLE3", "NEXTN", "MTP")
"""Upstream's algorithms whose drafts come from heads trained against the target model."""

NGRAM_DEFAULT_DRAFT_TOKENS = 12
STANDALONE_DEFAULT_STEPS = 3
"""Upstream's defaults (0.5.23: `_handle_ngram`, `_auto_choose_speculative_params`)."""


@dataclass(frozen=True)
class SpeculativeConfig:
    """Resolved settings. Invariant: `num_draft_tokens >= 2` (at least one draft a step)."""

    algorithm: str
    num_draft_tokens: int
    num_steps: int
    draft_model_path: str | None
    min_match_window: int
    max_match_window: int
    max_trie_depth: int
    capacity: int
    adaptive: bool = False
    """`--speculative-adaptive`: each request's drafts per step follow its acceptance and the
    measured cost of a drafted row (`draft_length`), within `max_drafts`, none where drafting
    does not pay."""

    @property
    def max_drafts(self) -> int:
        """Drafted tokens one verify step checks at most."""
        return self.num_draft_tokens - 1

    def describe(self) -> str:
        """The startup log line's settings."""
        adaptive = ", adaptive" if self.adaptive else ""
        if self.algorithm == NGRAM:
            return (
                f"NGRAM, up to {self.max_drafts} drafts a step{adaptive}, match window {self.min_match_window}-"
                f"{self.max_match_window}, trie depth {self.max_trie_depth}, corpus capacity {self.capacity} tokens"
            )
        return f"STANDALONE, {self.num_steps} draft steps{adaptive} from {self.draft_model_path}"


def speculative_config(args: ServerArgs) -> SpeculativeConfig | None:
    """The settings `args` ask for, None without `--speculative-algorithm`; raises ValueError with
    the reason for anything this server cannot serve."""
    if args.speculative_algorithm is None:
        return None
    algorithm = args.speculative_algorithm.upper()
    if algorithm in NEEDS_DRAFT_HEADS:
        raise ValueError(
            f"--speculative-algorithm {algorithm} needs a draft head trained against the target model, which this "
            f"server does not load; use {NGRAM} (no extra weights) or {STANDALONE} with --speculative-draft-model-path"
        )
    if algorithm not in (NGRAM, STANDALONE):
        raise ValueError(f"--speculative-algorithm must be {NGRAM} or {STANDALONE}, got {args.speculative_algorithm!r}")
    if args.speculative_eagle_topk not in (None, 1):
        raise ValueError(
            f"--speculative-eagle-topk {args.speculative_eagle_topk} is refused: only a chain of drafts (topk 1) is "
            "verified here; a tree of drafts needs tree attention masks that the attention ops do not take"
        )
    steps, draft_tokens = args.speculative_num_steps, args.speculative_num_draft_tokens
    if algorithm == NGRAM:
        draft_tokens = draft_tokens or NGRAM_DEFAULT_DRAFT_TOKENS
        steps = steps or draft_tokens
        draft_path = None
    else:
        if not args.speculative_draft_model_path:
            raise ValueError(f"--speculative-algorithm {STANDALONE} needs --speculative-draft-model-path")
        steps = steps or (draft_tokens - 1 if draft_tokens else STANDALONE_DEFAULT_STEPS)
        draft_tokens = draft_tokens or steps + 1
        if draft_tokens != steps + 1:
            raise ValueError(
                f"--speculative-num-draft-tokens ({draft_tokens}) must be --speculative-num-steps + 1 ({steps + 1}): "
                "with topk 1 each draft step adds one token to the chain"
            )
        draft_path = args.speculative_draft_model_path
    if draft_tokens < 2 or steps < 1:
        raise ValueError(
            f"--speculative-num-draft-tokens must be at least 2 and --speculative-num-steps at least 1, got "
            f"{draft_tokens} and {steps}"
        )
    low, high = args.speculative_ngram_min_match_window_size, args.speculative_ngram_max_match_window_size
    if not 1 <= low <= high:
        raise ValueError(f"the NGRAM match window sizes must satisfy 1 <= min <= max, got {low} and {high}")
    if args.speculative_ngram_max_trie_depth < 2 or args.speculative_ngram_capacity < 0:
        raise ValueError("--speculative-ngram-max-trie-depth must be at least 2 and the capacity non-negative")
    return SpeculativeConfig(
        algorithm=algorithm,
        num_draft_tokens=draft_tokens,
        num_steps=steps,
        draft_model_path=draft_path,
        min_match_window=low,
        max_match_window=high,
        max_trie_depth=args.speculative_ngram_max_trie_depth,
        capacity=args.speculative_ngram_capacity,
        adaptive=args.speculative_adaptive,
    )
