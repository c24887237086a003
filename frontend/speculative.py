"""API speculative execution (`@sgl.function(num_api_spec_tokens=N)`) for completion backends.

An API call per `gen` is slow and billed per prompt. With speculation, the first `gen` asks for
at least N tokens *without* stop strings; later gens and constant text are then matched against
that speculated continuation instead of calling the API again:
- a `gen` with stop strings takes the speculated text up to its earliest stop string (the stop
  string itself stays, to be matched by the constant text the program appends next);
- constant text that the continuation starts with is consumed from it; any other text means the
  model and the program diverged, and the speculation is dropped.
A `gen` without stop strings cannot be cut reliably without a tokenizer, so it calls the API.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sglang.frontend.backend.base import BaseBackend, Completion, Prompt
from sglang.frontend.sampling_params import SamplingParams


@dataclass
class CompletionSpeculator:
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
