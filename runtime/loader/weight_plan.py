"""Which weights a run serves quantized, decided from the source and the flags before loading.

- A GGUF keeps its quantization by default (why users pick one): its Q4_1/Q8_0 tensors are
  served as their exact int4/int8 repacking. An explicit `--dtype` asks for the dequantized
  model in that dtype instead, so `--dtype float32` reproduces the float conversion.
- `--quantization FORMAT` quantizes the decoder layers' linears at load, for any source (a
  GGUF's kept blocks are then not used: the one format asked for is served).
- Otherwise (a Hugging Face folder) everything stays dense.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sglang.ops.quant import QuantizedWeight, WeightFormat

from .gguf_quantized import quantized_tensors
from .hf_folder import ModelSource


@dataclass(frozen=True)
class WeightPlan:
    kept: dict[str, QuantizedWeight] = field(default_factory=dict)
    """Checkpoint name -> exact quantized tensor from the source."""
    target: WeightFormat | None = None
    """The format `--quantization` asks for, applied to decoder-layer linears left dense."""


def weight_plan(source: ModelSource, dtype: str, quantization: str | None) -> WeightPlan:
    if quantization is not None:
        return WeightPlan(target=WeightFormat.parse(quantization))
    if source.origin.suffix.lower() == ".gguf" and dtype == "auto":
        return WeightPlan(kept=quantized_tensors(source.origin))
    return WeightPlan()
