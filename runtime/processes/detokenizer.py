"""Incremental detokenization in its own process.

For each request it keeps the output ids and returns the whole text so far. The text is built
incrementally, as upstream SGLang's detokenizer does: a step decodes only the ids after the last
committed text, with the few ids before them as context (so a tokenizer that drops a leading
space on the first token of a decode still gets it right), and commits the new text once it
ends on a whole character. A step's cost is thus independent of the output's length; decoding
the whole output each step would make a long output's detokenization quadratic. While a
request runs, text that could still grow into a stop string, or that ends inside a multi-byte
character, is held back, so streamed text never has to be taken back; once the request finishes
on a stop string, the text is cut where the stop string begins (unless `no_stop_trim`). A
`stop_regex` likewise: the last as many characters as its longest match are held back (none for
an unbounded pattern, whose match may then have been streamed before the cut), and the text is
cut where the pattern matched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import zmq

from sglang.runtime.observability import request_stamps
from sglang.runtime.observability.stage_spans import DetokenizeSpans
from sglang.runtime.observability.tracing import StageTracer, TraceConfig
from sglang.runtime.processes import ipc
from sglang.runtime.processes.child_setup import freeze_startup_objects, init_child_process
from sglang.runtime.processes.messages import DecodeSpec, TextBatch, TextUpdate, TokenBatch, TokenUpdate
from sglang.runtime.processes.preload import TOKENIZER_CODE, import_modules
from sglang.runtime.requests.finish_reason import FinishReason
from sglang.runtime.requests.stop_regex import first_match, longest_reach

logger = logging.getLogger(__name__)


@dataclass
class _Stream:
    """One request's output. Invariant: `text` is the decoded text of `ids[:read_offset]`, and
    `ids[context_offset:read_offset]` are the ids whose decode ends it (the next step's context)."""

    spec: DecodeSpec
    ids: list[int] = field(default_factory=list)
    text: str = ""
    context_offset: int = 0
    read_offset: int = 0


def held_back(text: str, stops: tuple[str, ...], regexes: tuple[str, ...] = ()) -> str:
    """`text` less any ending that is an incomplete character, a proper prefix of a stop string,
    or short enough to be the start of a stop_regex match."""
    if text.endswith("\ufffd"):
        text = text.rstrip("\ufffd")
    reach = longest_reach(regexes) or 0
    if reach:
        text = text[: max(len(text) - reach, 0)]
    for k in range(min(len(text), max((len(s) for s in stops), default=0)), 0, -1):
        if any(s.startswith(text[-k:]) for s in stops):
            return text[:-k]
    return text


def text_ids(ids: list[int], finish_reason: FinishReason | None, spec: DecodeSpec) -> list[int]:
    """The ids whose text is returned: as SGLang, a matched stop token (an end token or one of
    `stop_token_ids`) ends the output ids but not the text, unless `no_stop_trim`."""
    matched = None if finish_reason is None else finish_reason.matched
    if spec.trim_stop and isinstance(matched, int) and ids and ids[-1] == matched:
        return ids[:-1]
    return ids


def trimmed(text: str, finish_reason: FinishReason | None, spec: DecodeSpec) -> str:
    matched = None if finish_reason is None else finish_reason.matched
    if not spec.trim_stop or not isinstance(matched, str):
        return text
    if matched in spec.stop_regexes and matched not in spec.stop_strings:
        found = first_match((matched,), text)
        return text if found is None else text[: found[1]]
    return text[: text.index(matched)] if matched in text else text


Decode = Callable[[list[int], bool, bool], str]
"""`(ids, skip_special_tokens, spaces_between_special_tokens) -> text`, as `tokenizer.decode`."""


def decodes_directly(tokenizer: Any) -> bool:
    """Whether `tokenizer.decode` of a list of ids is exactly its `tokenizers` backend's decode:
    a fast tokenizer whose class keeps transformers' own `decode` and `_decode`
    (transformers/tokenization_utils_base.py `decode`, transformers/tokenization_utils_tokenizers.py
    `TokenizersBackend._decode`), with `clean_up_tokenization_spaces` off, so that `_decode`
    returns the backend's text unchanged and ignores `spaces_between_special_tokens`."""
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:  # transformers 4 names its fast class otherwise: the general path
        return False
    cls = type(tokenizer)
    return (
        isinstance(tokenizer, TokenizersBackend)
        and cls.decode is PreTrainedTokenizerBase.decode
        and cls._decode is TokenizersBackend._decode
        and not tokenizer.clean_up_tokenization_spaces
    )


def text_decoder(tokenizer: Any) -> Decode:
    """`tokenizer.decode`, called straight on the backend where `decodes_directly` says that is
    the same. Why: the detokenizer decodes twice per streamed token, and transformers' checks and
    conversions around the backend's call cost several times the call."""
    if decodes_directly(tokenizer):
        backend = tokenizer._tokenizer
        return lambda ids, skip, _spaces: backend.decode(ids, skip_special_tokens=skip)
    return lambda ids, skip, spaces: tokenizer.decode(
        ids, skip_special_tokens=skip, spaces_between_special_tokens=spaces
    )


class Detokenizer:
    def __init__(self, tokenizer: Any, spans: DetokenizeSpans | None = None) -> None:
        self.decode = text_decoder(tokenizer)
        self.streams: dict[str, _Stream] = {}
        self.spans = spans
        """Times traced requests' updates (None when tracing is off)."""

    def process(self, batch: TokenBatch) -> TextBatch:
        if self.spans is None:
            return TextBatch([self._one(update) for update in batch.updates])
        out = []
        for update in batch.updates:
            start = time.time_ns()
            out.append(self._one(update))
            self.spans.observe(update, start, time.time_ns())
        return TextBatch(out)

    def _one(self, update: TokenUpdate) -> TextUpdate:
        stream = self.streams.get(update.rid)
        if stream is None:
            assert update.decode_spec is not None, "a request's first update carries its decode spec"
            stream = self.streams[update.rid] = _Stream(update.decode_spec)
        stream.ids.extend(update.new_token_ids)
        spec = stream.spec
        ids = text_ids(stream.ids, update.finish_reason, spec)
        if update.finish_reason is None:
            text = held_back(self._extended(stream, ids), spec.stop_strings, spec.stop_regexes)
        else:
            text = trimmed(self._final(stream, ids), update.finish_reason, spec)
            del self.streams[update.rid]
        return TextUpdate(update.rid, text, list(stream.ids), update.finish_reason, update.meta)

    def _decode(self, ids: list[int], spec: DecodeSpec) -> str:
        return self.decode(ids, spec.skip_special_tokens, spec.spaces_between_special_tokens)

    def _tail(self, stream: _Stream, ids: list[int]) -> str:
        """The text of `ids[read_offset:]`, decoded after its context ids."""
        context = self._decode(ids[stream.context_offset : stream.read_offset], stream.spec)
        return self._decode(ids[stream.context_offset :], stream.spec)[len(context) :]

    def _extended(self, stream: _Stream, ids: list[int]) -> str:
        """The whole text of `ids`; commits the new part once it ends on a whole character."""
        tail = self._tail(stream, ids)
        text = stream.text + tail
        if tail and not tail.endswith("\ufffd"):
            stream.text, stream.context_offset, stream.read_offset = text, stream.read_offset, len(ids)
        return text

    def _final(self, stream: _Stream, ids: list[int]) -> str:
        if len(ids) < stream.read_offset:  # a trimmed stop token was already committed: start over
            return self._decode(ids, stream.spec)
        return stream.text + self._tail(stream, ids)


def run_detokenizer_process(
    tokenizer_folder: Connection, endpoints: ipc.Endpoints, log_level: str, trace: TraceConfig | None = None
) -> None:
    """Starts beside the scheduler: imports the tokenizer's code while the model loads, then waits
    for the tokenizer's folder on `tokenizer_folder` (closed unsent when the start failed)."""
    init_child_process("detokenizer", log_level)
    import_modules(*TOKENIZER_CODE)
    from sglang.runtime.loader.tokenizer import load_tokenizer

    try:
        folder = tokenizer_folder.recv()
    except EOFError:
        return
    tracer = StageTracer.start(trace)
    spans = None if tracer is None else DetokenizeSpans(tracer)
    detokenizer = Detokenizer(load_tokenizer(Path(folder)), spans)
    ctx = zmq.Context()
    inbox = ipc.pull(ctx, endpoints.detokenizer)
    outbox = ipc.push(ctx, endpoints.tokenizer)
    freeze_startup_objects()
    while True:
        batches = ipc.recv_some(inbox)
        stamps = request_stamps.STAMPS
        for batch in batches:
            if stamps is not None:
                request_stamps.stamp_first_updates(stamps, batch.updates, "detokenizer_received")
            texts = detokenizer.process(batch)
            if stamps is not None:
                request_stamps.stamp_first_updates(stamps, batch.updates, "sending_to_manager")
            ipc.send(outbox, texts)
