"""From `ServerArgs` to a model on its platform: select the platform, open the source, choose and
bind one kernel per op for this model, build the architecture, fill its weights (with a progress
bar), move it to the device. Under tensor parallelism (the process's `tp_group()`, joined before)
the model holds this rank's shard and the source reads only this rank's slices."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from sglang.ops.selection import OpTable
from sglang.platforms import Platform, select_platform
from sglang.platforms.base import ModelFacts
from sglang.runtime.distributed.group import tp_group
from sglang.runtime.layers.moe import prime_moe_layers
from sglang.runtime.layers.quantized import apply_weight_formats, planned_formats, prime_quantized_layers
from sglang.runtime.layers.sharding import attention_heads
from sglang.runtime.loader import ModelSource, open_model_source
from sglang.runtime.loader.weight_plan import WeightPlan, weight_plan
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.decoder import DecoderForCausalLM
from sglang.runtime.models.registry import model_class_for
from sglang.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

KERNEL_FAMILIES_ENV = "SGLANG_KERNEL_FAMILIES"
"""`SGLANG_KERNEL_FAMILIES=triton[,...]` replaces the selected platform's kernel families (the
reference stays last), for conformance runs of one family on another platform's tensors: the
schedule fuzzer runs the Engine with the triton family on cpu tensors in Triton's interpreter
(`TRITON_INTERPRET=1`). Unset, the platform's declared families are used."""


@dataclass
class LoadedModel:
    platform: Platform
    source: ModelSource
    config: ModelConfig
    model: DecoderForCausalLM
    op_table: OpTable

    @property
    def context_length(self) -> int:
        return self.config.max_position

    def load_tokenizer(self) -> Any:
        return self.source.load_tokenizer()


def select(args: ServerArgs) -> Platform:
    platform = select_platform(args.device)
    families = [f.strip() for f in os.environ.get(KERNEL_FAMILIES_ENV, "").split(",") if f.strip()]
    if families:
        platform = type(platform)(kernel_families=families)
    platform.configure_host_threads(args.cpu_threads)
    platform.check_page_size(args.page_size)
    return platform


def open_source(args: ServerArgs, platform: Platform) -> tuple[ModelSource, ModelConfig]:
    """The model's source and config, without reading weights."""
    source = open_model_source(
        args.model_path,
        args.dtype,
        platform_default=platform.capabilities.default_dtype,
        supported_dtypes=platform.capabilities.dtypes,
    )
    platform.check_dtype(source.dtype)
    return source, ModelConfig.from_dict(source.config)


def model_facts(
    args: ServerArgs, dtype: torch.dtype, config: ModelConfig, plan: WeightPlan | None = None
) -> ModelFacts:
    """The shapes this rank's kernels see (its share of the heads under tensor parallelism) and
    the weight formats they are handed."""
    q_heads, kv_heads = attention_heads(config.num_heads, config.attention_kv_heads, tp_group())
    return ModelFacts(
        dtype=dtype,
        head_dim=config.attention_head_dim,
        num_heads=q_heads.size,
        num_kv_heads=kv_heads.size,
        page_size=args.page_size,
        weight_format=planned_formats(plan.kept, plan.target) if plan is not None else "dense",
        features=config.op_features,
    )


def load_model(args: ServerArgs, platform: Platform | None = None) -> LoadedModel:
    platform = platform or select(args)
    started = time.perf_counter()
    source, config = open_source(args, platform)
    plan = weight_plan(source, args.dtype, args.quantization)
    op_table = platform.bind_ops(
        model_facts(args, source.dtype, config, plan),
        args.op_overrides(),
        force_reference=True if args.reference_ops else None,
    )
    model = build_model(source, config, plan, platform)
    logger.info(
        "loaded %s (%s, %s) on %s in %.1f s",
        source.origin.name,
        config.architectures[0],
        str(source.dtype).removeprefix("torch."),
        platform.describe(),
        time.perf_counter() - started,
    )
    return LoadedModel(platform=platform, source=source, config=config, model=model, op_table=op_table)


def build_model(source: ModelSource, config: ModelConfig, plan: WeightPlan, platform: Platform) -> DecoderForCausalLM:
    """The architecture filled from `source`, in `plan`'s weight formats, on the platform's device,
    its kernels' weight layouts built by the ops bound now."""
    model = model_class_for(config)(config, source.dtype)
    weights = tqdm(
        source.weights(read=model.checkpoint_read),
        total=source.num_tensors,
        desc="Loading weights",
        unit="tensor",
        leave=False,
    )
    with torch.inference_mode():
        model.load_weights(weights)
        apply_weight_formats(model, plan.kept, plan.target, source.dtype)
    model.to(platform.device()).eval()
    with torch.inference_mode():
        prime_quantized_layers(model)
        prime_moe_layers(model)
    return model
