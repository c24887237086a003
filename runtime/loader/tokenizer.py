"""Tokenizers: loading them from a folder, and building them from GGUF metadata.

A GGUF file has no tokenizer.json; it stores the vocabulary, merges, token types, special token ids
and chat template as metadata under llama.cpp's key names. For byte-level BPE vocabularies
(`tokenizer.ggml.model == "gpt2"`: Llama-3, Qwen, SmolLM, DeepSeek V3, GLM-4) with a pre-tokenizer listed in
`_PRE_TOKENIZERS`, the tokenizer is built here directly with `tokenizers`; anything else is
handed to transformers' own GGUF tokenizer conversion (correct, but it re-parses the file, which
takes seconds: `benchmarks/README.md`, "Measured costs"). SentencePiece vocabularies
(`tokenizer.ggml.model == "llama"`: Gemma, Phi-3, Mistral) load that way, with transformers'
per-architecture rules (Gemma's merge order and no prefix space, Phi-3's prefix normalizer); a
vocabulary neither path handles fails with UnsupportedModelError naming its tokenizer model.
Either way the result is saved as ordinary tokenizer files next to the converted weights, so
later starts load it like any Hugging Face tokenizer.

The pre-tokenizer (how text is split before BPE) is not in the vocabulary; llama.cpp names it in
`tokenizer.ggml.pre`, and `_PRE_TOKENIZERS` reproduces llama.cpp's regexes for the names it knows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE

from .errors import UnsupportedModelError

# llama.cpp token types (llama_token_type): control tokens are special, user-defined ones are added whole.
_CONTROL, _USER_DEFINED = 3, 4

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

_O200K_SPLIT = (  # llama.cpp's "gpt-4o" (gpt-oss's o200k_harmony): the regex of its tokenizer.json
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

DEEPSEEK3_SPLITS = (  # llama.cpp's DEEPSEEK3_LLM (llama-vocab.cpp): three regexes, each splitting the last's pieces
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)
_NO_BOS = frozenset({"glm4", "chatglm-bpe"})
"""Pre-tokenizer names for which llama.cpp never adds BOS (CHATGLM4: it sets no BOS token)."""


def _gpt2() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2() -> pre_tokenizers.PreTokenizer:
    # llama.cpp: "\p{N}" first, then the GPT-2 regex; equal to HF's Digits(individual) + ByteLevel.
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _gpt2()])


def _split(*regexes: str) -> Callable[[], pre_tokenizers.PreTokenizer]:
    """llama.cpp's regex pre-tokenizers: each regex splits the pieces the one before left (every
    piece kept, matched or not), then bytes map to GPT-2's printable alphabet."""

    def build() -> pre_tokenizers.PreTokenizer:
        return pre_tokenizers.Sequence(
            [
                *(pre_tokenizers.Split(Regex(regex), behavior="isolated") for regex in regexes),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )

    return build


_PRE_TOKENIZERS: dict[str, Callable[[], pre_tokenizers.PreTokenizer]] = {
    **dict.fromkeys(("gpt2", "default", "mpt", "olmo", "jais"), _gpt2),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"), _digits_then_gpt2
    ),
    **dict.fromkeys(
        ("llama-bpe", "llama3", "llama-v3", "smaug-bpe", "dbrx", "falcon3", *_NO_BOS), _split(_LLAMA3_SPLIT)
    ),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen"), _split(_QWEN2_SPLIT)),
    "deepseek-v3": _split(*DEEPSEEK3_SPLITS),
    "gpt-4o": _split(_O200K_SPLIT),
}


def can_build_fast(metadata: Mapping[str, Any]) -> bool:
    """Whether `build_gguf_tokenizer` handles this file (else use transformers' conversion)."""
    pre = metadata.get("tokenizer.ggml.pre", "default")
    return metadata.get("tokenizer.ggml.model") == "gpt2" and pre in _PRE_TOKENIZERS


def build_gguf_tokenizer(metadata: Mapping[str, Any]) -> Any:
    """A transformers fast tokenizer equivalent to llama.cpp's for a byte-level BPE GGUF vocabulary."""
    from transformers import PreTrainedTokenizerFast

    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
    backend = Tokenizer(BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    pre = metadata.get("tokenizer.ggml.pre", "default")
    backend.pre_tokenizer = _PRE_TOKENIZERS[pre]()
    backend.decoder = decoders.ByteLevel()
    types = metadata.get("tokenizer.ggml.token_type") or []
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == _CONTROL]
    )
    backend.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types) if k == _USER_DEFINED]
    )

    def token(key: str) -> str | None:
        index = metadata.get(f"tokenizer.ggml.{key}")
        return tokens[index] if index is not None and 0 <= index < len(tokens) else None

    bos, eos = token("bos_token_id"), token("eos_token_id")
    # llama.cpp adds BOS/EOS around every encoded text when the file asks; mirror that in the post-processor.
    prefix = [bos] if bos is not None and metadata.get("tokenizer.ggml.add_bos_token") and pre not in _NO_BOS else []
    suffix = [eos] if eos is not None and metadata.get("tokenizer.ggml.add_eos_token") else []
    if prefix or suffix:
        ids = {t: metadata[f"tokenizer.ggml.{k}"] for t, k in ((bos, "bos_token_id"), (eos, "eos_token_id")) if t}
        backend.post_processor = processors.TemplateProcessing(
            single=[*prefix, "$A", *suffix],
            pair=[*prefix, "$A", *suffix, *prefix, "$B:1", *suffix],
            special_tokens=[(t, ids[t]) for t in dict.fromkeys(prefix + suffix)],
        )
    arch = metadata.get("general.architecture", "")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=bos,
        eos_token=eos,
        unk_token=token("unknown_token_id"),
        pad_token=token("padding_token_id"),
        chat_template=metadata.get("tokenizer.chat_template"),
        model_max_length=metadata.get(f"{arch}.context_length", 1 << 30),
        clean_up_tokenization_spaces=False,
    )


def save_gguf_tokenizer(gguf_path: Path, metadata: Mapping[str, Any], out_dir: Path) -> None:
    """Write tokenizer files for the GGUF at `gguf_path` into `out_dir` (fast path when possible)."""
    if can_build_fast(metadata):
        tokenizer = build_gguf_tokenizer(metadata)
    else:
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(
                str(gguf_path.parent), gguf_file=gguf_path.name, local_files_only=True
            )
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            # transformers' conversion raises bare errors; name the file and what it asked for.
            kind, pre = metadata.get("tokenizer.ggml.model"), metadata.get("tokenizer.ggml.pre")
            raise UnsupportedModelError(
                f"{gguf_path.name}: cannot build its tokenizer (tokenizer.ggml.model {kind!r}, pre {pre!r}, "
                f"architecture {metadata.get('general.architecture')!r}): neither the byte-level BPE path "
                f"here nor transformers' GGUF conversion handles it ({exc})"
            ) from exc
    tokenizer.save_pretrained(str(out_dir))


def load_tokenizer(folder: Path) -> Any:
    """The tokenizer saved in `folder`, loaded from local files only (nothing is downloaded)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def chat_template_in(folder: Path) -> str | None:
    """The default chat template stored in `folder`'s tokenizer files, or None."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    config = folder / "tokenizer_config.json"
    if not config.is_file():
        return None
    template = json.loads(config.read_text()).get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None
