"""The backend interface: everything the interpreter asks of a model server.

The interpreter calls a backend from program executor threads, many at once (`run_batch`), so
every backend must be thread-safe. A backend never sees the executor itself, only a `Prompt`:
an immutable snapshot of the stream at the moment of the call.

Only `generate` is required. The rest have working defaults: hooks that are optimizations
(`cache_prefix`, `commit_lazy_operations`, `concatenate_and_append`) and housekeeping do nothing,
streaming falls back to one chunk, and `select` raises `BackendCapabilityError` naming the backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sglang.frontend.chat_template import ChatTemplateLike, get_chat_template
from sglang.frontend.choices import ChoicesDecision, ChoicesSamplingMethod
from sglang.frontend.errors import BackendCapabilityError
from sglang.frontend.sampling_params import SamplingParams
from sglang.frontend.transcript import ImageData

# What one generation returns: the text (a list of n texts when n > 1) and its meta info.
Completion = tuple[str | list[str], dict[str, Any]]


@dataclass(frozen=True)
class Prompt:
    """A stream as a backend sees it at one call."""

    stream_id: str
    text: str
    messages: tuple[dict, ...] = ()
    images: tuple[ImageData, ...] = ()
    role: str | None = None  # the open message's role, if any
    role_text: str = ""  # text written inside the open message so far


class BaseBackend(ABC):
    is_chat_model: bool = False
    supports_images: bool = False

    def __init__(self, chat_template: ChatTemplateLike | None = None):
        self.chat_template: ChatTemplateLike = chat_template or get_chat_template("default")

    def get_model_name(self) -> str:
        return type(self).__name__

    def get_chat_template(self) -> ChatTemplateLike:
        return self.chat_template

    @abstractmethod
    def generate(self, prompt: Prompt, params: SamplingParams) -> Completion:
        """Continue `prompt.text` (or `prompt.messages` for a chat API) once."""

    def generate_stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[tuple[str, dict[str, Any]]]:
        """Yield (new text, meta info so far) pieces whose concatenation is the completion."""
        text, meta = self.generate(prompt, params)
        yield (text[0] if isinstance(text, list) else text), meta

    def select(
        self, prompt: Prompt, choices: list[str], temperature: float, choices_method: ChoicesSamplingMethod
    ) -> ChoicesDecision:
        raise BackendCapabilityError(f"{type(self).__name__} cannot score choices, so select() is not available")

    def cache_prefix(self, prefix: str) -> None:
        """Prefill `prefix` so later requests that start with it reuse its KV cache."""
        return None  # a pure optimization: skipping it is correct, only slower

    def commit_lazy_operations(self, prompt: Prompt) -> None:
        """Prefill the stream's text before it forks, so every fork hits the cached prefix."""
        return None

    def concatenate_and_append(self, prompt: Prompt, branches: list[str]) -> bool:
        """`join("concate_and_append")`: the stream `prompt` (unchanged since it forked) is about to
        be extended by its forks' new text `branches`, in fork order.

        A backend may make the KV of `prompt.text + "".join(branches)` available from the KV the
        branches already computed, so that the stream's next request reuses it: parallel
        encoding, where each branch attended to the prefix and itself but not to the branches
        before it. Returns True when it did. The text itself is the interpreter's: returning
        False (plain text concatenation, recomputed with full attention) is always correct.
        """
        return False

    def flush_cache(self) -> None:
        """Drop the server's prefix cache."""
        return None

    def get_server_info(self) -> dict[str, Any]:
        return {}

    def shutdown(self) -> None:
        """Release connections (and any process the backend started)."""
        return None
