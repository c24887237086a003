"""What every recording stand-in of a vendor library shares: call records, contract checks, the
reference computation of paged attention, and installing a stand-in for one test.

A stand-in is a module object put in `sys.modules` under the vendor's import name for one test
only. Its functions check our side of the vendor's documented contract (argument names, types,
layouts, page views, host versus device tensors, workspace sizes), record the call, and compute
with our torch reference, so an adapter that passes the right arguments passes op parity. It
tests the adapter, never the device: nothing it computes says anything about the vendor kernel.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from sglang.ci.suites import paged_attention_cases as pac
from sglang.ci.suites.devices import assert_close
from sglang.ops.attention import AttentionInputs, AttentionLayer, ReferenceAttention
from sglang.ops.binding import load


class ContractError(AssertionError):
    """An adapter broke the vendor's documented contract."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise ContractError(message)


def expect_tensor(
    value: object, what: str, dtype: torch.dtype | None = None, device_type: str | None = None, ndim: int | None = None
) -> torch.Tensor:
    expect(isinstance(value, torch.Tensor), f"{what}: expected a tensor, got {type(value).__name__}")
    if dtype is not None:
        expect(value.dtype == dtype, f"{what}: dtype {value.dtype}, the contract wants {dtype}")
    if device_type is not None:
        expect(value.device.type == device_type, f"{what}: on {value.device}, the contract wants {device_type}")
    if ndim is not None:
        expect(value.dim() == ndim, f"{what}: {value.dim()}-D, the contract wants {ndim}-D")
    return value


@dataclass
class Recorder:
    calls: list[tuple[str, dict]] = field(default_factory=list)
    seen_workspaces: set[int] = field(default_factory=set)
    """Data pointers of workspaces a stand-in already checked on first use."""

    def record(self, name: str, **arguments: object) -> None:
        self.calls.append((name, arguments))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def last(self, name: str) -> dict:
        return next(args for n, args in reversed(self.calls) if n == name)


def module(name: str, **attributes: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attributes)
    return mod


@contextmanager
def installed(
    monkeypatch: pytest.MonkeyPatch, modules: dict[str, types.ModuleType], adapter_package: str
) -> Iterator[None]:
    """Puts the stand-in modules in `sys.modules` and makes the adapter modules import afresh
    against them; afterwards neither stays (the next import sees the machine's real state)."""

    def drop_adapters() -> None:
        for name in [n for n in sys.modules if n.startswith(adapter_package + ".") and not n.endswith(".family")]:
            monkeypatch.delitem(sys.modules, name)

    drop_adapters()
    for name, mod in modules.items():
        monkeypatch.setitem(sys.modules, name, mod)
    try:
        yield
    finally:
        for name in [n for n in sys.modules if n.startswith(adapter_package + ".") and not n.endswith(".family")]:
            del sys.modules[name]


def token_slots(pages: torch.Tensor, page_size: int, length: int) -> torch.Tensor:
    """The slots of a sequence of `length` tokens on `pages`."""
    return (pages.long()[:, None] * page_size + torch.arange(page_size)).flatten()[:length]


def reference_attention(
    q: torch.Tensor,
    kv_buffer: torch.Tensor,
    seq_lens: list[int],
    extend_lens: list[int],
    slots: list[torch.Tensor],
    layer: AttentionLayer,
) -> torch.Tensor:
    """Our reference over token-level slots of a `[2, slots, Hk, D]` buffer already holding every
    K/V (so its store rewrites what is there)."""
    heads, kv_heads, dim = q.shape[1], kv_buffer.shape[2], q.shape[2]
    inputs = AttentionInputs(
        tuple(seq_lens), tuple(extend_lens), torch.cat(slots) if slots else torch.zeros(0, dtype=torch.long)
    )
    reference = ReferenceAttention(heads, kv_heads, dim, q.dtype, q.device)
    meta = reference.plan(inputs)
    new = meta.new_slots
    out, _ = reference.forward(q, kv_buffer[0, new], kv_buffer[1, new], kv_buffer.clone(), meta, layer)
    return out


def latent_attention(
    query: torch.Tensor,
    rows: torch.Tensor,
    rank: int,
    seq_lens: list[int],
    extend_lens: list[int],
    slots: list[torch.Tensor],
    scale: float,
) -> torch.Tensor:
    """Absorbed MLA through our reference: `query` `[T, H, R + r]` attends over the cached rows
    `[N, R + r]` as multi-query attention with one KV head, keys the whole rows, values their
    first `rank` columns (padded to the key width, the padding's output dropped) -> `[T, H, R]`."""
    values = torch.cat([rows[:, :rank], torch.zeros_like(rows[:, rank:])], dim=-1)
    buffer = torch.stack([rows, values])[:, :, None]
    attended = reference_attention(query, buffer, seq_lens, extend_lens, slots, layer_from(scale, None, None))
    return attended[..., :rank]


def layer_from(scale: float, window: int | None, softcap: float | None) -> AttentionLayer:
    return AttentionLayer(layer_id=0, scale=scale, sliding_window=window, logit_softcap=softcap or None)


def run_paged_attention(
    monkeypatch: pytest.MonkeyPatch,
    standin: types.ModuleType,
    package: str,
    candidate: Any,
    scenario: str,
    layer: str,
    page_size: int,
    seed: int,
) -> Recorder:
    """Runs a paged-attention scenario through `candidate`'s adapter at `page_size` (whatever its
    family declares) on `standin`'s recording vendor module, checks it against the reference,
    and returns the calls it made."""
    recorder = Recorder()
    built = pac.build(scenario, layer, page_size, torch.bfloat16, torch.Generator().manual_seed(seed))
    with installed(monkeypatch, standin.build(recorder), package):
        backend_cls = load(candidate)

        def paged(*args: Any) -> Any:
            backend = backend_cls(*args)
            backend.page_size = page_size
            return backend

        first, second, _ = pac.run(paged, built)
    expected = pac.run(ReferenceAttention, built)
    assert_close((first, second), expected[:2], torch.bfloat16, "attention")
    return recorder
