"""Typed weights for `linear` and `embedding`: dense, int8 and int4 groupwise.

A `QuantizedWeight` stands for a `[out_features, in_features]` matrix `W`, stored by groups of
`group_size` consecutive input features of one output row:

- int8: `qdata` int8 `[N, K]`; `W = scales * q`. `group_size == K` is per channel.
- int4: `qdata` uint8 `[N, K // 2]`, two values a byte; `W = scales * q + offsets`, `q` in 0..15.
  Each 32 values of a row are 16 bytes: byte `j` holds value `j` in its low nibble and value
  `j + 16` in its high nibble (GGUF's Q4_1 block order, so Q4_1 repacks by copying bytes).
  Torch's own int4 convention (signed `q - 8`, zero point) is the same weight with
  `zero = offsets + 8 * scales`.

`scales` and `offsets` are float32 `[N, K // group_size]`. Invariant: `dequantize` is exact
float32 arithmetic (`q * scale + offset`, one rounding), so a kernel that dequantizes a tile and
accumulates in float32 differs from the reference only by summation order.

Rows are independent, so a weight may be cut and stacked by rows (`rows`, `cat_rows`): that is
how fused projections (q/k/v, gate/up), embedding lookups and column-parallel shards are built.
Columns may be cut on group boundaries (`columns`): a row-parallel shard.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

DENSE = "dense"


@dataclass(frozen=True)
class WeightFormat:
    bits: int
    """8 or 4."""
    group_size: int
    """Input features sharing one scale (and offset); 0 means the whole row (per channel)."""

    def __post_init__(self) -> None:
        if self.bits not in (4, 8):
            raise ValueError(f"weight formats are int8 or int4, not int{self.bits}")
        if self.group_size < 0 or (self.bits == 4 and self.group_size % 32):
            raise ValueError(f"int{self.bits} group size {self.group_size} is not supported (int4: multiples of 32)")

    @property
    def name(self) -> str:
        """What candidates declare in `Requirements.weight_formats`: `int4_g32`, `int8_channel`."""
        return f"int{self.bits}_" + (f"g{self.group_size}" if self.group_size else "channel")

    @classmethod
    def parse(cls, name: str) -> WeightFormat:
        """`int4` (group 32), `int8` (per channel), or a full name as `name` writes it."""
        defaults = {"int4": "int4_g32", "int8": "int8_channel"}
        kind, _, group = defaults.get(name, name).partition("_")
        if kind not in ("int4", "int8") or not (group == "channel" or group.startswith("g")):
            raise ValueError(f"unknown weight format {name!r} (int4, int8, int4_g<N>, int8_g<N>, int8_channel)")
        return cls(int(kind[3:]), 0 if group == "channel" else int(group[1:]))


@dataclass(frozen=True)
class QuantizedWeight:
    format: WeightFormat
    qdata: torch.Tensor
    scales: torch.Tensor
    offsets: torch.Tensor | None
    """int4 only; None for int8 (symmetric)."""
    dtype: torch.dtype = torch.float32
    """The model's activation dtype: what an embedding lookup of these rows returns."""
    kernel_layouts: dict[str, torch.Tensor] = field(default_factory=dict, compare=False, repr=False)
    """This same weight re-laid out for a kernel that reads it faster so, by the kernel's name:
    built by the kernel on first use and kept. A layout holds exactly the values above (a kernel
    computes the same from it as from them); rows and stacks of a weight start without any."""

    @property
    def shape(self) -> tuple[int, int]:
        rows, cols = self.qdata.shape
        return rows, cols * (2 if self.format.bits == 4 else 1)

    @property
    def group(self) -> int:
        """The group size in features (the row length for per-channel)."""
        return self.format.group_size or self.shape[1]

    @property
    def nbytes(self) -> int:
        tensors = [self.qdata, self.scales] + ([self.offsets] if self.offsets is not None else [])
        return sum(t.numel() * t.element_size() for t in tensors)

    def rows(self, index: torch.Tensor | slice) -> QuantizedWeight:
        """The rows `index` selects (a slice or a tensor of row ids), still quantized."""
        pick = (lambda t: t[index]) if isinstance(index, slice) else (lambda t: t.index_select(0, index))
        offsets = None if self.offsets is None else pick(self.offsets)
        return QuantizedWeight(self.format, pick(self.qdata), pick(self.scales), offsets, self.dtype)

    def columns(self, start: int, size: int) -> QuantizedWeight:
        """Input features `[start, start + size)` of every row, still quantized: a row-parallel
        shard. The cut must fall on group boundaries (and, for int4, on 32-value blocks), since
        a group's scale covers features on both sides of any other cut."""
        unit = max(self.group, 32) if self.format.bits == 4 else self.group
        if start % unit or size % unit:
            raise ValueError(
                f"{self.format.name}: input features [{start}, {start + size}) do not fall on groups of {unit}"
            )
        per_byte = 2 if self.format.bits == 4 else 1
        data = self.qdata[:, start // per_byte : (start + size) // per_byte]
        groups = slice(start // self.group, (start + size) // self.group)
        offsets = None if self.offsets is None else self.offsets[:, groups].contiguous()
        return QuantizedWeight(self.format, data.contiguous(), self.scales[:, groups].contiguous(), offsets, self.dtype)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        n, k = self.shape
        groups = k // self.group
        if self.format.bits == 4:
            blocks = self.qdata.view(n, k // 32, 16)
            q = torch.cat([blocks & 0x0F, blocks >> 4], dim=-1).reshape(n, groups, self.group).float()
            w = torch.addcmul(self.offsets[..., None].float(), q, self.scales[..., None].float())
        else:
            w = self.qdata.reshape(n, groups, self.group).float() * self.scales[..., None].float()
        return w.reshape(n, k).to(dtype)


def cat_rows(parts: list[QuantizedWeight]) -> QuantizedWeight:
    """The parts stacked by rows (a fused projection); every part must have the same format."""
    formats = {p.format for p in parts}
    if len(formats) != 1:
        raise ValueError(f"cannot stack weights of different formats: {sorted(f.name for f in formats)}")
    offsets = None if parts[0].offsets is None else torch.cat([p.offsets for p in parts])
    return QuantizedWeight(
        parts[0].format,
        torch.cat([p.qdata for p in parts]),
        torch.cat([p.scales for p in parts]),
        offsets,
        parts[0].dtype,
    )


def quantize(weight: torch.Tensor, fmt: WeightFormat, dtype: torch.dtype = torch.float32) -> QuantizedWeight:
    """Round-to-nearest weight-only quantization of a dense `[N, K]` weight (at load, `--quantization`).

    int8: symmetric, `scale = max|w| / 127` per group. int4: asymmetric over each group's
    range, `scale = (max - min) / 15`, `offset = min` (Q4_1's scheme).
    """
    w = weight.detach().float()
    n, k = w.shape
    group = fmt.group_size or k
    if k % group or (fmt.bits == 4 and k % 32):
        raise ValueError(f"{fmt.name}: {k} input features do not split into groups of {group}")
    g = w.reshape(n, k // group, group)
    if fmt.bits == 8:
        scales = g.abs().amax(-1) / 127
        q = torch.round(g / scales.clamp_min(1e-12)[..., None]).clamp(-127, 127).to(torch.int8)
        return QuantizedWeight(fmt, q.reshape(n, k).contiguous(), scales.contiguous(), None, dtype)
    low, high = g.amin(-1), g.amax(-1)
    scales = (high - low) / 15
    q = torch.round((g - low[..., None]) / scales.clamp_min(1e-12)[..., None]).clamp(0, 15).to(torch.uint8)
    blocks = q.reshape(n, k // 32, 2, 16)
    packed = (blocks[:, :, 0] | (blocks[:, :, 1] << 4)).reshape(n, k // 2)
    return QuantizedWeight(fmt, packed.contiguous(), scales.contiguous(), low.contiguous(), dtype)


def format_name(weight: torch.Tensor | QuantizedWeight) -> str:
    return weight.format.name if isinstance(weight, QuantizedWeight) else DENSE
