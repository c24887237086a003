"""Whether windowed layers keep only their window (the window pool), how big it is, and the log line.

Global layers keep every token; windowed layers keep, with the window pool on, only the tokens a
query may still see, in buffers of `--swa-full-tokens-ratio` times the full pool's slots
(upstream SGLang's hybrid SWA memory). The window pool is an optimization: where it does not
compose yet, windowed layers keep every token and the startup log says why.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang.ops.attention import AttentionBackend
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.server_args import ServerArgs


@dataclass(frozen=True)
class WindowLayout:
    """Which layers are windowed, and what one token takes in each kind of layer."""

    windowed: tuple[int, ...]
    num_layers: int
    window: int
    bytes_per_layer_token: int

    @classmethod
    def of(cls, config: ModelConfig, backend: AttentionBackend) -> WindowLayout | None:
        """None where no layer has a sliding window."""
        windowed = tuple(i for i in range(config.num_layers) if config.sliding_window_for(i) is not None)
        if not windowed:
            return None
        return cls(windowed, config.num_layers, int(config.sliding_window), backend.kv_bytes_per_token())

    def pool_bytes(self, full_tokens: int, window_tokens: int | None) -> int:
        """Bytes of every layer's buffer (`window_tokens` None: windowed layers keep every token)."""
        global_layers = self.num_layers - len(self.windowed)
        windowed_tokens = full_tokens if window_tokens is None else window_tokens
        return (full_tokens * global_layers + windowed_tokens * len(self.windowed)) * self.bytes_per_layer_token

    def bytes_per_full_token(self, ratio: float) -> float:
        """Bytes a full token takes with `ratio` window tokens per full token."""
        global_layers = self.num_layers - len(self.windowed)
        return (global_layers + ratio * len(self.windowed)) * self.bytes_per_layer_token

    def window_tokens(self, full_tokens: int, ratio: float, chunk: int) -> int:
        """Window slots for a full pool of `full_tokens`: `ratio` of them, but at least what one
        request needs to progress alone (a prefill chunk and the window before it, plus a page of
        margin for drafted tokens), and never more than the full pool."""
        return min(max(int(full_tokens * ratio), chunk + self.window + 64), full_tokens)

    def note(self, full_tokens: int, window_tokens: int | None, reason: str | None) -> str:
        """The startup line: the window pool's size and the memory it saves, or why there is none."""
        head = f"KV cache: {len(self.windowed)} of {self.num_layers} layers are windowed (window {self.window})"
        if window_tokens is None:
            return f"{head} and keep every token: {reason}"
        full = self.pool_bytes(full_tokens, None)
        used = self.pool_bytes(full_tokens, window_tokens)
        return (
            f"{head} and keep only their window: {full_tokens} full slots x {self.num_layers - len(self.windowed)} "
            f"global layers + {window_tokens} window slots x {len(self.windowed)} windowed layers, "
            f"{used / 2**20:.1f} MiB, {(full - used) / 2**20:.1f} MiB less than every layer keeping every token"
        )


def window_pool_refusal(args: ServerArgs, backend: AttentionBackend) -> str | None:
    """Why windowed layers keep every token under `args` and `backend`, or None when they need not."""
    if args.disable_hybrid_swa_memory:
        return "--disable-hybrid-swa-memory"
    if not backend.serves_window_slots:
        return f"the attention backend {type(backend).__name__} reads one slot list for every layer"
    if args.enable_hierarchical_cache:
        return "the hierarchical cache's tiers copy one slot space"
    if args.disaggregation_mode != "null":
        return "disaggregation transfers one slot space"
    if args.tp_size > 1:
        return "tensor-parallel followers size their pools apart from the leader's"
    return None
