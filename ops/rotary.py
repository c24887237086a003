"""Rotary position embedding: the cos/sin table for each scaling variant, and its application.

The table is built once at model construction (`RotaryTable.build`), so the forward pass only
indexes it by position: no data-dependent shapes and no host reads, which keeps the op usable
under graph capture and under JAX's jit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class RopeScaling:
    """A normalized view of a config's `rope_scaling` / `rope_parameters`.

    `kind` is one of `default`, `linear`, `dynamic`, `llama3`, `longrope`, `yarn`.
    """

    kind: str = "default"
    factor: float = 1.0
    original_max_position: int | None = None
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    short_factor: tuple[float, ...] = ()
    """longrope: per-frequency divisors within the original context, `long_factor` past it."""
    long_factor: tuple[float, ...] = ()
    attention_factor: float = 1.0
    """longrope and yarn: cos and sin are multiplied by it (scaling every rotary score by its square)."""
    beta_fast: float = 32.0
    """yarn: frequencies making more than `beta_fast` turns over the original context are kept,
    those making fewer than `beta_slow` divided by `factor`, the band between ramped."""
    beta_slow: float = 1.0
    truncate: bool = True
    mscale_all_dim: float = 0.0
    """yarn (DeepSeek): the softmax scale is multiplied by `yarn_mscale(factor, mscale_all_dim) ** 2`
    (`softmax_scale_factor`)."""

    SUPPORTED = ("default", "linear", "dynamic", "llama3", "longrope", "yarn")

    @classmethod
    def from_config(cls, raw: dict[str, Any] | None, max_position: int | None = None) -> RopeScaling:
        """`max_position` is the model's `max_position_embeddings`: longrope without a `factor`
        takes its ratio to the original context, as transformers does for Phi-3."""
        if not raw:
            return cls()
        kind = raw.get("rope_type") or raw.get("type") or "default"
        if kind not in cls.SUPPORTED:
            raise ValueError(f"rope scaling {kind!r} is not supported (supported: {', '.join(cls.SUPPORTED)})")
        original = raw.get("original_max_position_embeddings")
        factor = raw.get("factor")
        if factor is None and kind == "longrope" and max_position and original:
            factor = max_position / original
        if factor is None and kind == "yarn" and max_position and original:
            factor = max_position / original
        factor = float(factor if factor is not None else 1.0)
        attention_factor = 1.0
        if kind == "longrope":
            attention_factor = _longrope_attention_factor(raw, factor, original)
        elif kind == "yarn":
            attention_factor = _yarn_attention_factor(raw, factor)
        return cls(
            kind=kind,
            factor=factor,
            original_max_position=int(original) if original is not None else None,
            low_freq_factor=float(raw.get("low_freq_factor", 1.0)),
            high_freq_factor=float(raw.get("high_freq_factor", 4.0)),
            short_factor=tuple(float(f) for f in raw.get("short_factor") or ()),
            long_factor=tuple(float(f) for f in raw.get("long_factor") or ()),
            attention_factor=attention_factor,
            beta_fast=float(raw.get("beta_fast") or 32.0),
            beta_slow=float(raw.get("beta_slow") or 1.0),
            truncate=bool(raw.get("truncate", True)),
            mscale_all_dim=float(raw.get("mscale_all_dim") or 0.0),
        )

    @property
    def softmax_scale_factor(self) -> float:
        """What an MLA model multiplies its softmax scale by (DeepSeek's yarn `mscale_all_dim`)."""
        if self.kind == "default" or not self.mscale_all_dim:
            return 1.0
        return yarn_mscale(self.factor, self.mscale_all_dim) ** 2


def _longrope_attention_factor(raw: dict[str, Any], factor: float, original: int | None) -> float:
    if raw.get("attention_factor") is not None:
        return float(raw["attention_factor"])
    if factor <= 1.0 or not original:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(original))


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn_attention_factor(raw: dict[str, Any], factor: float) -> float:
    if raw.get("attention_factor") is not None:
        return float(raw["attention_factor"])
    mscale, mscale_all_dim = raw.get("mscale"), raw.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
    return yarn_mscale(factor)


def _yarn_inv_freq(inv_freq: torch.Tensor, dim: int, base: float, s: RopeScaling, original_max: int) -> torch.Tensor:
    """YaRN: frequencies interpolated (divided by `factor`) below a band of turn counts over the
    original context, kept above it, ramped linearly across it (as transformers computes it)."""

    def correction_dim(turns: float) -> float:
        return dim * math.log(original_max / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(s.beta_fast), correction_dim(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / ((high - low) or 0.001)).clamp(0, 1)
    return inv_freq / s.factor * ramp + inv_freq * (1 - ramp)


def _inv_freq(dim: int, base: float) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))


def _llama3_inv_freq(inv_freq: torch.Tensor, s: RopeScaling, original_max: int) -> torch.Tensor:
    """Llama 3.1: long wavelengths are divided by `factor`, short ones kept, the band between
    interpolated smoothly."""
    low_wavelen = original_max / s.low_freq_factor
    high_wavelen = original_max / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    smooth = (original_max / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    interpolated = (1 - smooth) * inv_freq / s.factor + smooth * inv_freq
    out = torch.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
    mid = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(mid, interpolated, out)


@dataclass(frozen=True)
class RotaryTable:
    """`cos_sin[p]` is `[cos(p * f) | sin(p * f)]` over the `rotary_dim / 2` frequencies."""

    cos_sin: torch.Tensor
    rotary_dim: int

    @classmethod
    def build(
        cls, rotary_dim: int, max_position: int, base: float, scaling: RopeScaling = RopeScaling()
    ) -> RotaryTable:
        """Dynamic NTK scaling is applied per position: position `p` uses the base Hugging Face
        computes for a sequence of length `p + 1`. This equals HF's incremental decoding and, for
        prompts within `original_max_position`, HF's prefill too. Longrope likewise switches
        from the short to the long factors per position, past `original_max_position` (Hugging
        Face switches a whole forward by its longest position)."""
        positions = torch.arange(max_position, dtype=torch.float64)
        inv_freq = _inv_freq(rotary_dim, base)
        original_max = scaling.original_max_position or max_position
        if scaling.kind == "linear":
            inv_freq = inv_freq / scaling.factor
        elif scaling.kind == "llama3":
            inv_freq = _llama3_inv_freq(inv_freq, scaling, original_max)
        elif scaling.kind == "yarn":
            inv_freq = _yarn_inv_freq(inv_freq, rotary_dim, base, scaling, original_max)
        if scaling.kind == "dynamic":
            seq_len = torch.clamp(positions + 1, min=original_max)
            scaled_base = base * ((scaling.factor * seq_len / original_max) - (scaling.factor - 1)) ** (
                rotary_dim / (rotary_dim - 2)
            )
            exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim
            freqs = positions[:, None] / scaled_base[:, None] ** exponents[None, :]
        elif scaling.kind == "longrope":
            short = inv_freq / torch.tensor(scaling.short_factor, dtype=torch.float64)
            long = inv_freq / torch.tensor(scaling.long_factor, dtype=torch.float64)
            past_original = (positions + 1 > original_max)[:, None]
            freqs = positions[:, None] * torch.where(past_original, long[None, :], short[None, :])
        else:
            freqs = positions[:, None] * inv_freq[None, :]
        cos_sin = (torch.cat([freqs.cos(), freqs.sin()], dim=-1) * scaling.attention_factor).float()
        return cls(cos_sin=cos_sin, rotary_dim=rotary_dim)


def apply_rotary(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin: torch.Tensor,
    is_neox: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotates `q` `[T, Hq, D]` and `k` `[T, Hk, D]` by their token positions `[T]`.

    `is_neox` pairs dimension `i` with `i + D/2` (Llama/HF layout); otherwise adjacent pairs
    `(2i, 2i+1)` are rotated (GPT-J layout). Returns new tensors in the inputs' dtype.
    """
    cos, sin = cos_sin.index_select(0, positions).chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        rot_dim = cos.shape[-1] * 2
        xr, x_pass = x[..., :rot_dim].float(), x[..., rot_dim:]
        if is_neox:
            x1, x2 = xr.chunk(2, dim=-1)
            out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        else:
            x1, x2 = xr[..., 0::2], xr[..., 1::2]
            out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
        return torch.cat([out.to(x.dtype), x_pass], dim=-1)

    return rotate(q), rotate(k)
