"""Top-k/top-p sampling through `flashinfer.sampling.top_k_top_p_sampling_from_logits`.

FlashInfer filters on the tempered distribution with both thresholds on the original
probabilities (`filter_apply_order="joint"`, our definition) and draws from its own generator.
Rows it cannot serve make the whole batch take the reference: min-p (no joint min-p form) and
per-request seeds (our seeded rows draw from host generators, which FlashInfer cannot consume).
Greedy rows take the argmax either way.
"""

from __future__ import annotations

import flashinfer
import torch

from sglang.ops.sampling import SamplingTensors
from sglang.ops.sampling import sample as reference_sample


def sample(logits: torch.Tensor, params: SamplingTensors) -> torch.Tensor:
    greedy = logits.argmax(dim=-1)
    if params.all_greedy:
        return greedy
    if any(g is not None for g in params.generators) or bool((params.min_ps > 0).any()):
        return reference_sample(logits, params)
    device = logits.device
    temperatures = params.temperatures.to(device)
    scaled = logits.float() / temperatures.clamp(min=1e-6)[:, None]
    drawn = flashinfer.sampling.top_k_top_p_sampling_from_logits(
        scaled,
        params.top_ks.to(device=device, dtype=torch.int32),
        params.top_ps.to(device=device, dtype=torch.float32),
        filter_apply_order="joint",
        deterministic=True,
    )
    return torch.where(temperatures == 0, greedy, drawn.to(torch.int64))
