"""Every setting of the runtime, shared by `Engine(**kwargs)`, `sglang serve` and `sglang generate`.

Each field's help text is its `--flag` help; `add_cli_args` builds the flags from the fields, so
the CLI and the Python API cannot drift apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from sglang.ops.buckets import BucketPolicy
from sglang.ops.quant import WeightFormat
from sglang.runtime.disaggregation.config import MODES as DISAGGREGATION_MODES
from sglang.runtime.disaggregation.config import TRANSFER_BACKENDS
from sglang.runtime.memory.eviction import POLICIES
from sglang.runtime.memory.kv_dtype import KV_CACHE_DTYPES
from sglang.runtime.observability.tracing import TraceConfig
from sglang.runtime.parsers import REASONING_PARSERS, TOOL_CALL_PARSERS
from sglang.runtime.speculative.config import speculative_config

if TYPE_CHECKING:
    from sglang.platforms.base import Capabilities


LORA_BACKEND_FAMILIES = {"csgmv": "triton", "ascend": "torch_npu"}
"""Upstream's `--lora-backend` names that are not a kernel family's here, and the family meant."""


def _opt(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class ServerArgs:
    model_path: str | None = _opt(
        None, "Hugging Face folder or .gguf file; default: the embedded SmolLM2-135M-Instruct."
    )
    tokenizer_path: str | None = _opt(None, "Tokenizer folder, if not the model's own.")
    device: str = _opt("auto", "Platform to run on: auto, cpu, cuda, rocm, xpu, npu, tpu or an out-of-tree one.")
    dtype: str = _opt("auto", "Weight and activation dtype: auto, float32, bfloat16, float16.")
    quantization: str | None = _opt(
        None,
        "Weight-only quantization at load: int8 (per channel), int4 (group 32) or a format name (int4_g64, "
        "int8_g32). Default: a GGUF keeps its Q4_1/Q8_0 blocks (unless --dtype is given), other models stay dense.",
    )
    host: str = _opt("127.0.0.1", "Address the HTTP server binds.")
    port: int = _opt(30000, "Port the HTTP server listens on.")
    api_key: str | None = _opt(None, "Require `Authorization: Bearer KEY` on every request.")
    smg_grpc_mode: bool = _opt(
        False,
        "Serve smg's gRPC worker API (sglang.grpc.scheduler.SglangScheduler, from smg-grpc-proto) on --port "
        "instead of HTTP: smg (`smg launch --worker-urls grpc://HOST:PORT`) tokenizes and templates, this server "
        "runs token ids. /metrics and /health move to an HTTP sidecar on --port + 1. Needs the `grpc` extra.",
    )
    grpc_mode: bool = _opt(False, "(Deprecated, use --smg-grpc-mode) The same switch, under its older name.")
    smg_http_sidecar_port: int | None = _opt(
        None, "With --smg-grpc-mode: the port of the HTTP sidecar (/metrics, /health); default: --port + 1."
    )
    served_model_name: str | None = _opt(None, "Model name the OpenAI API reports and accepts.")
    weight_version: str = _opt(
        "default", "Label of the served weights, in every output's meta_info; /update_weight_version changes it."
    )
    chat_template: str | None = _opt(None, "Chat template: a named template or a Jinja file; default: the model's own.")
    reasoning_parser: str | None = _opt(
        None,
        "Split chat output into reasoning_content and content with this upstream parser (deepseek-r1, qwen3, ...).",
        choices=tuple(REASONING_PARSERS),
    )
    tool_call_parser: str | None = _opt(
        None,
        "Tool-call format of the model's output (upstream's names: hermes, llama3, mistral, ...); default: Hermes "
        "tags, else a plain JSON call.",
        choices=tuple(TOOL_CALL_PARSERS),
    )
    max_running_requests: int = _opt(64, "Most requests decoded together in one batch.")
    max_queued_requests: int = _opt(1024, "Most requests waiting for admission; past it the server answers 503.")
    max_request_bytes: int = _opt(
        16 << 20, "Largest request body accepted, in bytes; past it the server answers 413 without reading on."
    )
    max_total_tokens: int | None = _opt(None, "KV cache size in tokens; overrides --mem-fraction-static.")
    mem_fraction_static: float = _opt(0.2, "Fraction of free device memory given to the KV cache.")
    chunked_prefill_size: int = _opt(2048, "Most prompt tokens prefilled in one step; longer prompts are chunked.")
    page_size: int = _opt(1, "Tokens per KV cache page.")
    kv_cache_dtype: str = _opt(
        "auto",
        "KV cache storage dtype: auto (the model's dtype), bf16 or bfloat16 (half a float32 pool's memory and "
        "reads). fp8_e5m2, fp8_e4m3 and fp4_e2m1 are upstream's names too; the server refuses at startup a dtype "
        "its attention backend does not read, naming the dtypes it does.",
        choices=tuple(KV_CACHE_DTYPES),
    )
    swa_full_tokens_ratio: float = _opt(
        0.8,
        "Windowed (sliding-window) layers' KV slots as a share of the full layers' slots, where windowed layers "
        "keep only their window.",
    )
    disable_hybrid_swa_memory: bool = _opt(
        False, "Windowed layers keep every token, as full layers do (no separate window pool)."
    )
    schedule_policy: str = _opt(
        "lpm", "Admission order: lpm (longest cached prefix first) or fcfs.", choices=("lpm", "fcfs")
    )
    disable_radix_cache: bool = _opt(False, "Turn the prefix cache off (every prompt is prefilled in full).")
    radix_eviction_policy: str = _opt(
        "lru",
        "Order in which cached prefixes leave the KV pool: lru (least recently used), lfu (least frequently "
        "used), fifo, mru, filo, priority (lowest request priority first, then LRU) or slru (segmented LRU).",
        choices=tuple(POLICIES),
    )
    enable_hierarchical_cache: bool = _opt(
        False,
        "Keep prefixes evicted from the KV pool in lower tiers and load them back instead of recomputing. "
        "Tiers: the device pool, the host tier (--hicache-ratio / --hicache-size), the storage tier "
        "(--hicache-storage-backend). On cpu the pool is host memory already: the host tier is a second copy there "
        "(--hicache-ratio 0 puts storage directly behind the pool). Under --tp-size > 1 each rank keeps its shard "
        "of the KV in host rows and a storage folder of its own (keyed by model, tp size and rank).",
    )
    hicache_ratio: float = _opt(
        2.0,
        "Host tier size as a multiple of the device pool's tokens (0: no host tier); at most half the host's "
        "available memory.",
    )
    hicache_size: int = _opt(0, "Host tier size in GB, overriding --hicache-ratio when positive.")
    hicache_write_policy: str = _opt(
        "write_through",
        "When cached pages are stored below the device: write_through (when a request hands its KV to the cache), "
        "write_through_selective (once a second request reuses them) or write_back (when evicted from the pool; "
        "evicted pages are stored under every policy).",
        choices=("write_through", "write_through_selective", "write_back"),
    )
    hicache_io_backend: str = _opt(
        "kernel",
        "How pages are copied between tiers (upstream: direct or kernel). Here every copy goes through the "
        "platform's device runtime; both names are accepted and mean that.",
        choices=("direct", "kernel"),
    )
    hicache_storage_backend: str | None = _opt(
        None,
        "Storage tier: file (KV blocks in $SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR, default /tmp/hicache, or the "
        "extra config's storage_dir). Upstream's other backends (mooncake, hf3fs, nixl, ...) are not available.",
    )
    hicache_storage_prefetch_policy: str = _opt(
        "best_effort",
        "How long a waiting request's admission waits for its stored prefix to be read into memory (reads run "
        "off the step, while it waits): best_effort (never: what has been read is used, the rest recomputed), "
        "wait_complete, or timeout (the extra config's prefetch_timeout_base, default 1 s, plus "
        "prefetch_timeout_per_ki_token, default 0.25 s, per 1024 prompt tokens).",
        choices=("best_effort", "wait_complete", "timeout"),
    )
    hicache_storage_backend_extra_config: str | None = _opt(
        None,
        'JSON object for the storage backend: {"storage_dir": PATH, "block_tokens": N (tokens per block of the '
        'host and storage tiers, default 64), "prefetch_timeout_base": S, "prefetch_timeout_per_ki_token": S}.',
    )
    disaggregation_mode: str = _opt(
        "null",
        "Prefill-decode disaggregation: null (a unified server), prefill (computes prompts' KV and first tokens "
        "for a decode server, and runs the bootstrap server) or decode (receives them and generates the rest). "
        "Put both behind `smg launch --pd-disaggregation --prefill URL BOOTSTRAP_PORT --decode URL`.",
        choices=DISAGGREGATION_MODES,
    )
    disaggregation_bootstrap_port: int = _opt(
        8998, "Prefill server: port of its bootstrap server, which tells decode servers where to fetch KV from."
    )
    disaggregation_transfer_backend: str = _opt(
        "tcp",
        "How KV moves from prefill to decode: tcp (plain sockets between processes or hosts, no RDMA). "
        "Upstream's mooncake, nixl, ascend and mori are not available here.",
        choices=TRANSFER_BACKENDS,
    )
    cpu_threads: int | None = _opt(None, "torch intra-op threads on the cpu platform (default: torch's choice).")
    disable_cuda_graph: bool = _opt(
        False, "Run every decode step eagerly (no captured, compiled or jitted decode buckets, on any device)."
    )
    cuda_graph_max_bs: int | None = _opt(
        None,
        "Largest decode batch run as a captured bucket; default: the platform's (cpu: 16, every batch size its "
        "own bucket), else --max-running-requests.",
    )
    reference_ops: bool = _opt(False, "Force every op to its reference implementation (debugging, conformance).")
    op_backend: str | None = _opt(
        None,
        "Kernel family per op, OP=FAMILY[,OP=FAMILY...] (e.g. attention_backend=triton); startup fails with the "
        "reason if that family cannot serve the op. `sglang ops` lists the ops and candidates.",
    )
    context_length: int | None = _opt(None, "Longest prompt + output accepted; default: the model's.")
    allow_auto_truncate: bool = _opt(
        False,
        "Cut requests that do not fit the context instead of refusing them (HTTP 400): a prompt to its first "
        "context-length - 1 tokens, a max_new_tokens to what is left of the context.",
    )
    log_level: str = _opt("info", "Log level: debug, info, warning, error.")
    log_requests: bool = _opt(False, "Log one line per finished request.")
    enable_streaming_session: bool = _opt(
        False,
        "Allow /open_session with streaming: true (a session that always continues its last turn, one "
        "request at a time), as upstream.",
    )
    enable_response_store: bool = _opt(
        False,
        "Keep /v1/responses responses in memory (the newest 10,000) for previous_response_id, retrieval, "
        "deletion and background requests, as upstream. Not with prefill-decode disaggregation.",
    )
    enable_trace: bool = _opt(
        False,
        "Export OpenTelemetry spans of every request's stages (receive, tokenize, queue, prefill, decode, "
        "detokenize) to --otlp-traces-endpoint, parented on the caller's W3C traceparent header. Needs the "
        "`tracing` extra (pip install 'sglang-hal[tracing]').",
    )
    otlp_traces_endpoint: str = _opt(
        "localhost:4317",
        "OTLP collector the spans go to when --enable-trace is set: host:port for OTLP/gRPC, or a URL with "
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf.",
    )
    watchdog_timeout: float = _opt(
        300.0,
        "Seconds one scheduler step may take. A step past it (a hang, even inside native code) gets the scheduler "
        "killed; so does any death of an engine process. Pending requests then fail with 503, /health answers 503 "
        "with the cause, and `sglang serve` exits with status 1 for its supervisor to restart it.",
    )
    tp_size: int = _opt(1, "Tensor-parallel size: ranks (processes, one per device) the model is sharded over.")
    nnodes: int = _opt(1, "Nodes the tensor-parallel ranks are spread over (tp_size / nnodes ranks each).")
    node_rank: int = _opt(0, "This node's index; node 0 serves HTTP, the others run only their ranks.")
    dist_init_addr: str | None = _opt(
        None, "HOST:PORT where the ranks meet (node 0's address); needed with --nnodes > 1, else a free loopback port."
    )
    dist_timeout: float | None = _opt(
        None, "Seconds a collective waits for the other ranks before failing; default: --watchdog-timeout."
    )

    enable_lora: bool = _opt(False, "Serve LoRA adapters (implied by --lora-paths).")
    max_lora_rank: int | None = _opt(
        None, "Largest adapter rank the device slots hold; default: the largest of --lora-paths' adapters."
    )
    lora_target_modules: tuple[str, ...] | None = _opt(
        None,
        "Projections given LoRA slots (q_proj k_proj v_proj o_proj gate_proj up_proj down_proj qkv_proj "
        "gate_up_proj, or all); default: those --lora-paths' adapters target, else all.",
        nargs="*",
    )
    lora_paths: tuple[str, ...] | None = _opt(
        None,
        "LoRA adapters loaded at startup, each PATH, NAME=PATH or JSON "
        '{"lora_name": str, "lora_path": str, "pinned": bool}; each a local PEFT folder.',
        nargs="*",
    )
    max_loras_per_batch: int = _opt(8, "Device slots for adapters: most distinct adapters in one running batch.")
    max_loaded_loras: int | None = _opt(
        None, "Most adapters loaded (on the host) at a time; at least --max-loras-per-batch. Default: no limit."
    )
    lora_eviction_policy: str = _opt(
        "lru", "Which idle adapter leaves a full set of device slots: lru or fifo.", choices=("lru", "fifo")
    )
    lora_backend: str | None = _opt(
        None,
        "Kernel family of the LoRA ops: triton (csgmv is upstream's CUDA kernel; here it means triton), "
        "torch_native, or any family `sglang ops` lists. Default: the platform's first eligible family.",
    )
    speculative_algorithm: str | None = _opt(
        None,
        "Speculative decoding: NGRAM (drafts from n-grams of the request's own tokens) or STANDALONE (a smaller "
        "draft model). EAGLE, EAGLE3, NEXTN and MTP are refused: they need trained draft heads.",
    )
    speculative_draft_model_path: str | None = _opt(None, "STANDALONE: the draft model (a folder or .gguf file).")
    speculative_num_steps: int | None = _opt(
        None, "Draft steps per verification; default: NGRAM --speculative-num-draft-tokens, STANDALONE 3."
    )
    speculative_eagle_topk: int | None = _opt(
        None, "Drafts per step; only 1 (a chain of drafts) is served: a tree would need tree attention masks."
    )
    speculative_num_draft_tokens: int | None = _opt(
        None, "Tokens one verify step checks (the last token plus the drafts); default: NGRAM 12, STANDALONE steps+1."
    )
    speculative_adaptive: bool = _opt(
        False,
        "Adjust each request's drafts per step to its acceptance and the measured cost of a drafted row: the "
        "length with the most tokens per unit of step time, within --speculative-num-draft-tokens - 1, or none "
        "(with rare one-token probes) where drafting does not pay (upstream's flag; its "
        "--speculative-adaptive-config tuning file is not read).",
    )
    speculative_ngram_min_match_window_size: int = _opt(1, "NGRAM: shortest suffix of the tokens matched to draft.")
    speculative_ngram_max_match_window_size: int = _opt(12, "NGRAM: longest suffix of the tokens matched to draft.")
    speculative_ngram_max_trie_depth: int = _opt(18, "NGRAM: longest n-gram (matched suffix plus drafts) used.")
    speculative_ngram_capacity: int = _opt(
        10_000_000, "NGRAM: tokens of finished requests kept to draft from (0 drafts from each request's own only)."
    )

    def __post_init__(self) -> None:
        positive = (
            "max_running_requests",
            "max_queued_requests",
            "chunked_prefill_size",
            "page_size",
            "max_request_bytes",
        )
        if self.grpc_mode:  # upstream's older name folds into the current one
            self.smg_grpc_mode = True
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.cuda_graph_max_bs is not None and self.cuda_graph_max_bs < 1:
            raise ValueError(f"cuda_graph_max_bs must be at least 1, got {self.cuda_graph_max_bs}")
        if not 0 < self.mem_fraction_static < 1:
            raise ValueError(f"mem_fraction_static must lie in (0, 1), got {self.mem_fraction_static}")
        if self.radix_eviction_policy not in POLICIES:
            raise ValueError(f"radix_eviction_policy must be one of {', '.join(POLICIES)}")
        if self.schedule_policy not in ("lpm", "fcfs"):
            raise ValueError(f"schedule_policy must be lpm or fcfs, got {self.schedule_policy!r}")
        if self.tp_size < 1 or self.nnodes < 1 or self.tp_size % self.nnodes:
            raise ValueError(f"tp_size ({self.tp_size}) must be a positive multiple of nnodes ({self.nnodes})")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"node_rank must lie in [0, {self.nnodes}), got {self.node_rank}")
        for name, known in (("reasoning_parser", REASONING_PARSERS), ("tool_call_parser", TOOL_CALL_PARSERS)):
            value = getattr(self, name)
            if value is not None and value not in known:
                raise ValueError(f"{name} must be one of {', '.join(sorted(known))}, got {value!r}")
        if self.quantization is not None:
            WeightFormat.parse(self.quantization)  # a bad name fails here, with the accepted ones
        for name in ("lora_paths", "lora_target_modules"):
            if getattr(self, name) is not None:  # argparse gives lists
                setattr(self, name, tuple(getattr(self, name)))
        if self.lora_paths:
            self.enable_lora = True
        if self.max_loras_per_batch < 1:
            raise ValueError(f"max_loras_per_batch must be at least 1, got {self.max_loras_per_batch}")
        if self.max_loaded_loras is not None and self.max_loaded_loras < self.max_loras_per_batch:
            raise ValueError(
                f"max_loaded_loras ({self.max_loaded_loras}) must be at least max_loras_per_batch "
                f"({self.max_loras_per_batch})"
            )
        if self.lora_eviction_policy not in ("lru", "fifo"):
            raise ValueError(f"lora_eviction_policy must be lru or fifo, got {self.lora_eviction_policy!r}")
        if not 0 < self.swa_full_tokens_ratio <= 1:
            raise ValueError(f"swa_full_tokens_ratio must lie in (0, 1], got {self.swa_full_tokens_ratio}")
        self._check_hicache()
        self._check_disaggregation()
        if self.nnodes > 1 and not self.dist_init_addr:
            raise ValueError("--nnodes > 1 needs --dist-init-addr HOST:PORT (node 0's address)")
        speculative_config(self)  # a refused algorithm or bad draft settings fail here, with the reason

    def _check_hicache(self) -> None:
        if self.hicache_storage_backend not in (None, "file"):
            raise ValueError(f"hicache storage backend {self.hicache_storage_backend!r} is not available; use file")
        block = self.hicache_extra_config().get("block_tokens", 1)
        if not isinstance(block, int) or block < 1:
            raise ValueError(f"block_tokens of --hicache-storage-backend-extra-config must be positive: {block!r}")
        if not self.enable_hierarchical_cache:
            return
        if self.disable_radix_cache:
            raise ValueError("--enable-hierarchical-cache needs the radix cache (drop --disable-radix-cache)")

    def _check_disaggregation(self) -> None:
        if self.disaggregation_mode not in DISAGGREGATION_MODES:
            raise ValueError(f"--disaggregation-mode must be one of {', '.join(DISAGGREGATION_MODES)}")
        if self.disaggregation_transfer_backend not in TRANSFER_BACKENDS:
            raise ValueError(
                f"--disaggregation-transfer-backend {self.disaggregation_transfer_backend!r} is not available; "
                f"use {', '.join(TRANSFER_BACKENDS)}"
            )
        if self.disaggregation_mode != "null" and self.tp_size > 1:
            raise ValueError("--disaggregation-mode is not supported with --tp-size > 1 yet")
        if self.disaggregation_mode != "null" and self.enable_response_store:
            raise ValueError("--enable-response-store is not supported with --disaggregation-mode prefill or decode")

    def hicache_extra_config(self) -> dict[str, Any]:
        """`--hicache-storage-backend-extra-config` parsed (empty when unset)."""
        if not self.hicache_storage_backend_extra_config:
            return {}
        try:
            extra = json.loads(self.hicache_storage_backend_extra_config)
        except ValueError as e:
            raise ValueError(f"--hicache-storage-backend-extra-config is not JSON: {e}") from None
        if not isinstance(extra, dict):
            raise ValueError("--hicache-storage-backend-extra-config must be a JSON object")
        return extra

    def graph_buckets(self, capabilities: Capabilities | None = None) -> BucketPolicy | None:
        """The decode batch buckets made static on a platform with `capabilities`, or None with
        `--disable-cuda-graph`."""
        if self.disable_cuda_graph:
            return None
        default_max = capabilities.steps.default_max_batch if capabilities else None
        largest = min(self.cuda_graph_max_bs or default_max or self.max_running_requests, self.max_running_requests)
        if capabilities is not None and capabilities.steps.exact_buckets:
            return BucketPolicy(tuple(range(1, largest + 1)))
        return BucketPolicy.up_to(largest)

    def op_overrides(self) -> dict[str, str]:
        """`--op-backend` as {op: family}."""
        overrides = {}
        for item in filter(None, (part.strip() for part in (self.op_backend or "").split(","))):
            op, sep, family = item.partition("=")
            if not sep or not op.strip() or not family.strip():
                raise ValueError(f"--op-backend takes OP=FAMILY pairs, got {item!r}")
            overrides[op.strip()] = family.strip()
        if self.lora_backend:
            family = LORA_BACKEND_FAMILIES.get(self.lora_backend, self.lora_backend)
            for op in ("lora_shrink", "lora_expand"):
                overrides.setdefault(op, family)
        return overrides

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        for f in fields(cls):
            flag = "--" + f.name.replace("_", "-")
            extra = {k: v for k, v in f.metadata.items() if k != "help"}
            if f.type in ("bool", bool):
                parser.add_argument(flag, action="store_true", help=f.metadata["help"])
                continue
            kind = {"int": int, "float": float}.get(str(f.type).split(" |")[0], str)
            parser.add_argument(flag, type=kind, default=f.default, help=f.metadata["help"], **extra)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ServerArgs:
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})

    def trace_config(self, process: str) -> TraceConfig | None:
        """What `process` needs to export spans; None when tracing is off."""
        return TraceConfig(self.otlp_traces_endpoint, process) if self.enable_trace else None

    def replace(self, **changes: Any) -> ServerArgs:
        return dataclasses.replace(self, **changes)
