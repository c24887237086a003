"""API speculative execution (`@sgl.function(num_api_spec_tokens=N)`): fewer, longer API calls.

An API call per `gen` is slow and billed per prompt. With speculation, the first `gen` asks for
at least N tokens *without* stop strings; later gens and constant text are then matched against
that speculated continuation instead of calling the API again:
- a `gen` with stop strings takes the speculated text up to its earliest stop string (the stop
  string itself stays, to be matched by the constant text the program appends next);
- constant text that the continuation starts with is consumed from it; any other text means the
  model and the program diverged, and the speculation is dropped.
A `gen` without stop strings cannot be cut reliably without a tokenizer, so it calls the API.
Chat APIs cannot continue arbitrary text, so there a whole assistant turn is speculated at once
(`ChatTurnPlan`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sglang.frontend.backend.base import BaseBackend, Completion, Prompt
from sglang.frontend.sampling_params import SamplingParams


@dataclass
class CompletionSpeculator:
    """Speculation for completion APIs: later gens cut from one long continuation."""

    num_tokens: int
    pending: str = ""  # speculated text not yet used by the program

    def on_fill(self, value: str) -> None:
        self.pending = self.pending[len(value) :] if self.pending.startswith(value) else ""

    def generate(self, backend: BaseBackend, prompt: Prompt, params: SamplingParams) -> Completion:
        if not params.stop:
            self.pending = ""
            return backend.generate(prompt, params)
        meta: dict = {"speculative": True}
        if not self.pending:
            wide = dataclasses.replace(params, stop=[], max_new_tokens=max(params.max_new_tokens, self.num_tokens))
            text, meta = backend.generate(prompt, wide)
            self.pending = text[0] if isinstance(text, list) else text
        cut = min((i for i in (self.pending.find(s) for s in params.stop) if i >= 0), default=len(self.pending))
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out, meta


@dataclass
class ChatTurnPlan:
    """Speculation for chat APIs: a whole assistant turn becomes one API call.

    Inside the turn, constant text and gens are recorded instead of executed. When the turn ends,
    one call (at least N tokens, no stop strings) writes the whole turn, which is then matched
    against the recorded pattern: constant text must appear verbatim; a gen takes the text up to
    its earliest stop string (the last gen of the turn may take the rest). A reply that does not
    match is retried, then reported.
    """

    num_tokens: int
    params: SamplingParams | None = None  # the first gen's parameters shape the call
    items: list[tuple[str, str | None, list[str]]] = dataclasses.field(default_factory=list)

    def add_text(self, text: str) -> None:
        self.items.append((text, None, []))

    def add_gen(self, name: str | None, params: SamplingParams) -> None:
        self.params = self.params or params
        self.items.append(("", name or "", list(params.stop)))

    def resolve(self, backend: BaseBackend, prompt: Prompt, tries: int = 3) -> list[tuple[str, str | None]]:
        """(text, variable name or None) pieces of the turn, in order."""
        if self.params is None:
            return [(text, None) for text, _, _ in self.items]
        wide = dataclasses.replace(
            self.params, stop=[], max_new_tokens=max(self.params.max_new_tokens, self.num_tokens)
        )
        reply = ""
        for _ in range(tries):
            reply, _meta = backend.generate(prompt, wide)
            reply = reply[0] if isinstance(reply, list) else reply
            pieces = self._match(reply)
            if pieces is not None:
                return pieces
        raise ValueError(f"the speculative assistant turn did not match the program after {tries} tries: {reply!r}")

    def _match(self, reply: str) -> list[tuple[str, str | None]] | None:
        pieces: list[tuple[str, str | None]] = []
        rest = reply
        for i, (text, name, stops) in enumerate(self.items):
            if name is None:
                if not rest.startswith(text):
                    return None
                rest = rest[len(text) :]
                pieces.append((text, None))
                continue
            cut = min((p for p in (rest.find(s) for s in stops) if p >= 0), default=-1)
            if cut < 0 and i < len(self.items) - 1:
                return None  # a gen in the middle needs a stop string to end at
            value, rest = (rest, "") if cut < 0 else (rest[:cut], rest[cut:])
            pieces.append((value, name or None))
        return pieces
