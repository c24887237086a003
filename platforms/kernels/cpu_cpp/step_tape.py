"""Step tapes: a captured decode step's kernel calls, recorded once and replayed from C++.

The cpu platform captures each decode bucket's step (`platforms/cpu/runtime.py`). `record_tape`
runs the step once under a dispatch mode that sees every op it calls (the family's kernels go
through `torch.ops.sglang_cpu_cpp` while it records), and writes each call into a `StepTape`
(`csrc/step_tape.h`) with the tensors it was made with; a replay makes the same calls in order,
each kernel writing into the output it returned when recorded. Nothing is dispatched, allocated
or re-viewed between kernels, which is what a TorchScript replay of the same step still paid for.

What a replay reads is what the recorded tensors hold at that moment: the weights, the bucket's
static ids, positions and attention metadata (which the step runner rewrites before each replay)
and the KV buffers, which the family's attention updates in place. Views are not replayed: the
view the step made when recorded aliases the same storage, which the tape keeps alive.

The tape has a call for each of the family's decode kernels (LoRA's included, not MLA's) and for
the few torch ops a step makes beside them: a dense layer's `linear`, `mm`, `addmm` and
`embedding`, and `index_select`, `to`, `mul`, `add` and `copy_`. A step the tape cannot replay
raises `Untapeable` with the reason: an op it has no call for (a kernel of another family, an
activation torch computes), or a read of a tensor's value into Python (`.item()`), which would
freeze a per-step value into the tape. The caller then captures the step another way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from sglang.ops.step import StepOutput
from sglang.platforms.device_runtime import BucketStep
from sglang.platforms.kernels.cpu_cpp.build import NAME, dispatched_kernel_ops, ensure_built
from sglang.platforms.kernels.cpu_cpp.tape_arena import TapeArena, storage_key, tensors_in


class Untapeable(Exception):
    """The step makes a call a tape cannot replay; the message names it."""


@dataclass(frozen=True)
class RecordedCall:
    op: torch._ops.OpOverload
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any


class _Recorder(TorchDispatchMode):
    """Runs every op as usual and keeps the call, its arguments and its result."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[RecordedCall] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        self.calls.append(RecordedCall(func, args, kwargs, result))
        return result


_EMPTY_FACTORIES = frozenset(
    {"empty.memory_format", "empty_like.default", "new_empty.default", "empty_strided.default"}
)
"""Factories whose values no call may read before writing them: nothing to replay."""


@dataclass
class TapedStep:
    """A recorded bucket step; calling it replays the tape over the KV buffers it was recorded with."""

    tape: Any  # the extension's StepTape
    logits: torch.Tensor
    kv_addresses: tuple[int, ...]

    def __call__(self, kv_buffers: list[torch.Tensor]) -> StepOutput:
        if tuple(b.data_ptr() for b in kv_buffers) != self.kv_addresses:
            raise RuntimeError("a step tape replays over the KV buffers it was recorded with, not new ones")
        self.tape.replay()
        return self.logits, kv_buffers


def record_tape(step: BucketStep, kv_buffers: list[torch.Tensor], arena: TapeArena | None = None) -> TapedStep:
    """Runs `step` once, recording it; raises `Untapeable` where a replay would not be the step.
    The run is a real step (it writes what the step writes), as a trace's is. With an `arena`,
    the buffers the step allocated are replaced by views of it (`tape_arena.py`), all but the
    logits, which the caller reads after each replay."""
    recorder = _Recorder()
    with dispatched_kernel_ops(), recorder:
        logits, written = step(kv_buffers)
    if any(w.data_ptr() != b.data_ptr() for w, b in zip(written, kv_buffers, strict=True)):
        raise Untapeable("the step wrote new KV buffers instead of updating its own in place")
    if not any(call.op.namespace == NAME for call in recorder.calls):
        raise Untapeable(f"the step calls no {NAME} kernels")
    calls = [tape_call for call in recorder.calls if (tape_call := _tape_call(call)) is not None]
    if arena is not None:
        calls = _in_arena(calls, _created(recorder.calls) - {storage_key(logits)}, arena)
    tape = ensure_built().StepTape()  # loaded already: the step called its kernels
    for name, args in calls:
        getattr(tape, name)(*args)
    return TapedStep(tape, logits, tuple(b.data_ptr() for b in kv_buffers))


TapeCall = tuple[str, tuple[Any, ...]]
"""A `StepTape` method's name and its arguments."""


def _tape_call(call: RecordedCall) -> TapeCall | None:
    """The tape call that replays `call`; None for one with nothing to replay (a view, an empty
    buffer)."""
    op, args, result = call.op, call.args, call.result
    name = op._opname if op.namespace == NAME else f"{op._opname}.{op._overloadname}"
    if op.namespace == NAME:
        if call.kwargs or not hasattr(ensure_built().StepTape, name):
            raise Untapeable(f"no tape call for {op}")
        outputs = result if isinstance(result, tuple) else (result,)
        return name, (*args, *outputs)
    if op.namespace != "aten":
        raise Untapeable(f"no tape call for {op}")
    if name in _EMPTY_FACTORIES or _aliases_an_input(op, args, result):
        return None
    if name in ("to.dtype", "_to_copy.default"):
        return "copy", (result, args[0])
    if name == "copy_.default":
        return "copy", (args[0], args[1])
    if name == "index_select.default":
        return "index_select", (args[0], args[1], args[2], result)
    if name in ("mul.Tensor", "add.Tensor", "mm.default", "addmm.default") and _tensors(args) and not call.kwargs:
        return op._opname, (*args, result)
    if name == "linear.default" and not call.kwargs:
        return "linear", (args[0], args[1], args[2] if len(args) > 2 else None, result)
    if name == "embedding.default" and len(args) == 2 and args[1].is_contiguous():
        # the rows of args[0] named by args[1]: as index_select over views of the same storages
        return "index_select", (args[0], 0, args[1].view(-1), result.view(-1, args[0].shape[-1]))
    raise Untapeable(f"no tape call for {op}")


def _created(calls: list[RecordedCall]) -> set[int]:
    """Storages the step allocated: first seen in a call's result, not in an argument before."""
    seen, created = set(), set()
    for call in calls:
        seen.update(storage_key(t) for t in tensors_in(call.args))
        results = call.result if isinstance(call.result, (tuple, list)) else (call.result,)
        created.update(key for t in tensors_in(results) if (key := storage_key(t)) and key not in seen)
        seen.update(storage_key(t) for t in tensors_in(results))
    return created


def _in_arena(calls: list[TapeCall], created: set[int], arena: TapeArena) -> list[TapeCall]:
    """`calls` with every tensor over a `created` storage replaced by the same view of the arena."""
    offsets = arena.place([args for _, args in calls], created)

    def moved(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and (key := storage_key(value)) in offsets:
            return arena.view(value, offsets[key])
        if isinstance(value, (list, tuple)):
            return type(value)(moved(v) for v in value)
        return value

    return [(name, tuple(moved(a) for a in args)) for name, args in calls]


def _tensors(args: tuple[Any, ...]) -> bool:
    return all(isinstance(a, torch.Tensor) for a in args)


def _aliases_an_input(op: torch._ops.OpOverload, args: tuple[Any, ...], result: Any) -> bool:
    """Whether the call only made views: it writes no argument, and each result tensor shares an
    input tensor's storage (`to` to the dtype a tensor has returns the tensor itself)."""
    if any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments):
        return False
    results = result if isinstance(result, (tuple, list)) else (result,)
    storages = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
    return all(isinstance(r, torch.Tensor) and r.untyped_storage().data_ptr() in storages for r in results)
