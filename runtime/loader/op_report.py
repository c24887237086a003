"""`sglang ops`: the op table a server would bind, without loading weights.

For a device this machine has, the table is what `sglang serve` binds (packages checked for
real). For one it lacks, the table is the platform's declaration: vendor packages are assumed
importable unless named in `assume_missing`, and the table is headed by why the device is
unavailable here.
"""

from __future__ import annotations

from collections.abc import Sequence

from sglang.ops.selection import OpTable
from sglang.platforms import platform_class, select_platform
from sglang.runtime.loader.model_loading import model_facts, open_source
from sglang.runtime.server_args import ServerArgs


def op_table(args: ServerArgs, assume_missing: Sequence[str] = ()) -> OpTable:
    platform = select_platform() if args.device == "auto" else platform_class(args.device)()
    source, config = open_source(args, platform)
    return platform.select_ops(
        model_facts(args, source, config),
        args.op_overrides(),
        force_reference=True if args.reference_ops else None,
        assume_missing=assume_missing,
    )
