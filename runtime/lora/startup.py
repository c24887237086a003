"""Builds the scheduler's `LoraManager` from the server's flags, or refuses with the reason.

The device slots are sized once: `--max-lora-rank` (default: the largest rank of the adapters
given at startup) and `--lora-target-modules` (default: the union of theirs, else every
projection). An adapter loaded later must fit both.
"""

from __future__ import annotations

from sglang.runtime.lora.adapter import PROJECTIONS, LoraError, expand_targets, read_adapter
from sglang.runtime.lora.manager import LoraManager
from sglang.runtime.lora.paths import parse_lora_path
from sglang.runtime.lora.replica import LoraMirror
from sglang.runtime.models.decoder import DecoderForCausalLM
from sglang.runtime.server_args import ServerArgs

DEFAULT_MAX_RANK = 16
"""Slot rank with neither --max-lora-rank nor a startup adapter to size it from."""


def build_lora_manager(
    args: ServerArgs, model: DecoderForCausalLM, mirror: LoraMirror | None = None
) -> LoraManager | None:
    """None without --enable-lora; raises ValueError (a startup failure) with the reason. `mirror`:
    where the manager's slot commands go besides this rank (the other tensor-parallel ranks)."""
    if not args.enable_lora:
        return None
    refs = [parse_lora_path(entry) for entry in args.lora_paths or ()]
    if len({r.name for r in refs}) != len(refs):
        raise LoraError("--lora-paths names an adapter twice")
    # Read once unchecked, to size the slots from them when the flags do not.
    found = [read_adapter(r.name, r.path, args.max_lora_rank, None) for r in refs]
    max_rank = args.max_lora_rank or max((a.rank for a in found), default=DEFAULT_MAX_RANK)
    if args.lora_target_modules:
        targets = expand_targets(args.lora_target_modules)
    else:
        targets = frozenset().union(*(a.target_modules for a in found)) if found else frozenset(PROJECTIONS)
    manager = LoraManager(
        model,
        args.max_loras_per_batch,
        max_rank,
        targets,
        args.max_loaded_loras,
        args.lora_eviction_policy,
        renames=model.checkpoint_renames,
        mirror=mirror,
    )
    for ref in refs:
        manager.load(ref)
    return manager
