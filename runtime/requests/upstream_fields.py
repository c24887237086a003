"""Upstream SGLang request fields whose feature this server does not have.

Each is accepted at its default (null, false, 0, or a per-prompt list of those), so that
requests built by upstream's clients and routers, which send many of them as defaults, are
served; any other value is refused with a 400 naming the field and the missing feature.
`GENERATE` covers `/generate`'s top level; `OPENAI` the SGLang extras of the OpenAI routes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Missing:
    feature: str
    default: Any = None
    """The one value besides null that is accepted."""

    def accepts(self, value: Any) -> bool:
        if isinstance(value, list):
            return all(self.accepts(v) for v in value)
        # `is`/type check: 0 == False in Python, but `false` is no rank and `0` no flag.
        return value is None or (type(value) is type(self.default) and value == self.default)


_MULTIMODAL = "multimodal input (this model has no vision or audio encoder)"
_PD = "prefill-decode disaggregation"
_DP = Missing("data parallelism (this server is its only rank, 0)", 0)
_SGLEXT = "SGLang's response extensions (sglext)"

_SHARED = {
    "routed_dp_rank": _DP,
    "data_parallel_rank": _DP,
    "disagg_prefill_dp_rank": _DP,
    "return_hidden_states": Missing("hidden-state output", False),
    "return_routed_experts": Missing("routed-expert capture", False),
    "routed_experts_start_len": Missing("routed-expert capture", 0),
    "return_sampling_mask": Missing("sampling masks", False),
    "sampling_logprobs_mode": Missing("sampling masks"),
    "return_flat_raw_output_top_logprobs": Missing("flat top-logprob arrays", False),
    "custom_logit_processor": Missing("custom logit processors"),
    "images_config": Missing(_MULTIMODAL),
    "video_config": Missing(_MULTIMODAL),
    "mm_processor_kwargs": Missing(_MULTIMODAL),
    "use_audio_in_video": Missing(_MULTIMODAL, False),
    "max_dynamic_patch": Missing(_MULTIMODAL),
    "min_dynamic_patch": Missing(_MULTIMODAL),
    "extra_key": Missing("cache namespaces"),
    "cache_salt": Missing("cache namespaces"),
    "custom_labels": Missing("custom metric labels"),
}

GENERATE: dict[str, Missing] = {
    **_SHARED,
    "input_embeds": Missing("input embeddings"),
    "video_data": Missing(_MULTIMODAL),
    "audio_data": Missing(_MULTIMODAL),
    "mm_hashes": Missing(_MULTIMODAL),
    "mm_content_hashes": Missing(_MULTIMODAL),
    "modalities": Missing(_MULTIMODAL),
    "image_max_dynamic_patch": Missing(_MULTIMODAL),
    "video_max_dynamic_patch": Missing(_MULTIMODAL),
    "need_wait_for_mm_inputs": Missing(_MULTIMODAL),
    "num_items_assigned": Missing(_MULTIMODAL),
    "encoder_urls": Missing(_MULTIMODAL),
    "watermark": Missing("watermarking"),
    "return_flat_raw_top_logprobs": Missing("flat top-logprob arrays", False),
    "return_flat_raw_top_logprobs_b64": Missing("flat top-logprob arrays", False),
    "return_indexer_topk": Missing("sparse-attention indexer capture", False),
    "lora_id": Missing("LoRA adapter ids (name the adapter in lora_path)"),
    "positional_embed_overrides": Missing("embedding overrides"),
    "bootstrap_pair_key": Missing(_PD),
    "decode_tp_size": Missing(_PD),
    "http_worker_ipc": Missing("multiple tokenizer workers"),
    "background": Missing("background requests", False),
    "require_reasoning": Missing("requiring reasoning", False),
    "max_thinking_tokens": Missing("thinking budgets"),
    "return_bytes": Missing("image generation", False),
    "external_trace_header": Missing("trace propagation"),
    "received_time": Missing("client-set arrival times"),
    "multi_item_delimiter_indices": Missing("multi-item scoring"),
    "token_indices_to_pool": Missing("multi-item scoring"),
    "kv_hints": Missing("hierarchical-cache hints"),
}

OPENAI: dict[str, Missing] = {
    **_SHARED,
    "session_params": Missing("sessions on the OpenAI routes (use /generate)"),
    "return_spec_tokens_details": Missing("speculative decoding", False),
    "return_token_ids": Missing(_SGLEXT, False),
    "return_prompt_token_ids": Missing(_SGLEXT, False),
    "return_meta_info": Missing(_SGLEXT, False),
    "return_input_ids_in_sglext": Missing(_SGLEXT, False),
    "return_output_ids_in_sglext": Missing(_SGLEXT, False),
    "thinking": Missing("thinking configs (use chat_template_kwargs or reasoning_effort)"),
    "task": Missing("task-specific prompting"),
    "input_ids": Missing("token-id prompts on this route (send messages, or use /v1/completions)"),
    "lora_path": Missing("lora_path on the OpenAI routes (name the adapter in model, as <base>:<adapter>)"),
}


def first_refused(values: Mapping[str, Any], table: Mapping[str, Missing]) -> tuple[str, str] | None:
    """(field, message) for the first field of `values` in `table` set to a refused value."""
    for name, value in values.items():
        missing = table.get(name)
        if missing is not None and not missing.accepts(value):
            return name, f"{name}: {missing.feature} is not supported by this server"
    return None
