"""SGLang's native generate request (`/generate`, `Engine.generate`), normalized and validated.

A request carries one prompt or a batch (`text` or `input_ids` as a list); every other field is
either one value for all prompts or a list with one value per prompt. `split()` turns it into
one `SingleInput` per prompt; each is validated before anything is sent to the scheduler.

Every field of upstream SGLang's `GenerateReqInput` is accepted: those below, and those whose
feature this server lacks (`upstream_fields.GENERATE`) at their default only. `model`, which
SGLang's routers add, names the served model. `session_params` continue a session's turn;
`session_id`, `routing_key` and
`conversation_id` identify a request to routers and change nothing here; `no_logs` is always
honoured (no request content is ever logged).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from typing import Any

from sglang.runtime.disaggregation.messages import Bootstrap
from sglang.runtime.processes.messages import LogprobRequest
from sglang.runtime.requests import upstream_fields
from sglang.runtime.requests.errors import InvalidRequestError
from sglang.runtime.requests.sampling_params import SamplingParams, SamplingParamsError
from sglang.runtime.requests.session_params import SessionParams


@dataclass
class SingleInput:
    rid: str
    text: str | None
    input_ids: list[int] | None
    params: SamplingParams
    logprobs: LogprobRequest
    return_text_in_logprobs: bool
    stream: bool
    priority: int
    log_metrics: bool = True
    return_prompt_token_ids: bool = False
    lora_path: str | None = None
    bootstrap: Bootstrap | None = None
    max_new_tokens_given: bool = False
    """Whether the client set max_new_tokens (only then is prompt + max_new_tokens checked against
    the context, as upstream; the default is cut at the context length)."""
    session: SessionParams | None = None
    """The session turn this prompt continues (`runtime/processes/sessions.py`), if any."""


@dataclass
class GenerateInput:
    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None
    rid: str | list[str] | None = None
    return_logprob: bool | list[bool] = False
    logprob_start_len: int | list[int] = -1
    top_logprobs_num: int | list[int] = 0
    token_ids_logprob: list[int] | list[list[int]] | None = None
    return_text_in_logprobs: bool = False
    stream: bool = False
    priority: int | list[int] | None = None
    image_data: Any = None
    """Accepted so that the error names the problem: no served architecture has vision."""
    model: str | None = None
    log_metrics: bool = True
    """False: the request is left out of the metrics (health probes)."""
    return_entropy: bool = False
    """meta_info gets `output_token_entropy`: the entropy (nats) of each output token's distribution."""
    return_prompt_token_ids: bool = False
    session_id: str | None = None
    routing_key: str | None = None
    conversation_id: str | None = None
    no_logs: bool = False
    lora_path: str | list[str | None] | None = None
    """The LoRA adapter (by name) of every prompt, or per prompt of a batch; None: the base model."""
    trace_context: dict[str, str] | None = None
    """W3C trace-context headers (`traceparent`, `tracestate`) of the caller, when it sent them."""
    bootstrap_host: str | list[str] | None = None
    """Prefill-decode disaggregation (the router sets these three, per prompt of a batch or one
    for all): the prefill server's host, its bootstrap port, and the room naming the request."""
    bootstrap_port: int | list[int] | None = None
    bootstrap_room: int | list[int] | None = None
    session_params: dict[str, Any] | list[dict[str, Any]] | None = None
    """Upstream's: the open session turn each prompt continues (`runtime/requests/session_params.py`)."""

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> GenerateInput:
        if not isinstance(body, dict):
            raise InvalidRequestError("the request body must be a JSON object")
        refused = upstream_fields.first_refused(body, upstream_fields.GENERATE)
        if refused is not None:
            raise InvalidRequestError(refused[1], refused[0])
        body = {k: v for k, v in body.items() if k not in upstream_fields.GENERATE}
        known = {f.name for f in fields(cls)}
        unknown = set(body) - known
        if unknown:
            raise InvalidRequestError(f"unknown field(s): {', '.join(sorted(unknown))}", sorted(unknown)[0])
        return cls(**body)

    def __post_init__(self) -> None:
        """Checks the fields whose wrong type would otherwise pass silently (`"yes"` is truthy, a
        numeric rid would be used as a dict key), however the request was built: from an HTTP
        body or by `Engine.generate`."""
        rid = self.rid
        if rid is not None and not (
            isinstance(rid, str) or (isinstance(rid, list) and all(isinstance(r, str) for r in rid))
        ):
            raise InvalidRequestError("rid must be a string or a list of strings", "rid")
        for name in (
            "stream",
            "return_text_in_logprobs",
            "log_metrics",
            "return_entropy",
            "return_prompt_token_ids",
            "no_logs",
        ):
            if not isinstance(getattr(self, name), bool):
                raise InvalidRequestError(f"{name} must be a boolean", name)
        lora = self.lora_path
        if not (
            lora is None
            or isinstance(lora, str)
            or (isinstance(lora, list) and all(p is None or isinstance(p, str) for p in lora))
        ):
            raise InvalidRequestError("lora_path must be an adapter name or a list of them", "lora_path")
        for name in ("model", "session_id", "routing_key", "conversation_id"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise InvalidRequestError(f"{name} must be a string", name)

    @property
    def is_batch(self) -> bool:
        if self.text is not None:
            return isinstance(self.text, list)
        return bool(self.input_ids) and isinstance(self.input_ids[0], list)

    def split(self) -> list[SingleInput]:
        if self.image_data is not None:
            raise InvalidRequestError("this model does not accept images (it has no vision encoder)", "image_data")
        if (self.text is None) == (self.input_ids is None):
            raise InvalidRequestError("give exactly one of text or input_ids", "text")
        prompts = self._prompts()
        count = len(prompts)
        if count == 0:
            raise InvalidRequestError("the batch is empty", "text")
        items = []
        for i, prompt in enumerate(prompts):
            text, ids = (prompt, None) if self.text is not None else (None, prompt)
            if text is not None and not isinstance(text, str):
                raise InvalidRequestError("text must be a string or a list of strings", "text")
            if ids is not None and not (isinstance(ids, list) and all(isinstance(t, int) for t in ids)):
                raise InvalidRequestError("input_ids must be a list of token ids or a list of such lists", "input_ids")
            if (text is not None and text == "") or (ids is not None and not ids):
                raise InvalidRequestError("the prompt is empty", "text" if text is not None else "input_ids")
            raw_params = self._pick("sampling_params", i, count) or {}
            if not isinstance(raw_params, dict):
                raise InvalidRequestError("sampling_params must be an object, or one per prompt", "sampling_params")
            try:
                params = SamplingParams.from_dict(raw_params)
            except SamplingParamsError as e:
                raise InvalidRequestError(str(e), f"sampling_params.{e.field}") from None
            token_ids = self._pick("token_ids_logprob", i, count, nested=True) or ()
            items.append(
                SingleInput(
                    rid=self._rid(i, count),
                    text=text,
                    input_ids=ids,
                    params=params,
                    logprobs=LogprobRequest(
                        return_logprob=bool(self._pick("return_logprob", i, count)),
                        logprob_start_len=int(self._pick("logprob_start_len", i, count)),
                        top_logprobs_num=int(self._pick("top_logprobs_num", i, count)),
                        token_ids_logprob=tuple(token_ids),
                        return_entropy=self.return_entropy,
                    ),
                    return_text_in_logprobs=self.return_text_in_logprobs,
                    stream=self.stream,
                    priority=int(self._pick("priority", i, count) or 0),
                    log_metrics=self.log_metrics,
                    return_prompt_token_ids=self.return_prompt_token_ids,
                    lora_path=self._pick("lora_path", i, count),
                    bootstrap=self._bootstrap(i, count),
                    max_new_tokens_given=raw_params.get("max_new_tokens") is not None,
                    session=SessionParams.from_json(self._pick("session_params", i, count)),
                )
            )
        return items

    def _bootstrap(self, i: int, count: int) -> Bootstrap | None:
        values = {name: self._pick(f"bootstrap_{name}", i, count) for name in ("host", "port", "room")}
        if all(v is None for v in values.values()):
            return None
        host, port, room = values["host"], values["port"], values["room"]
        if not isinstance(host, str) or not host:
            raise InvalidRequestError("bootstrap_host must be the prefill server's host", "bootstrap_host")
        for name, value in (("bootstrap_port", port), ("bootstrap_room", room)):
            if type(value) is not int or value < 0:
                raise InvalidRequestError(f"{name} must be a non-negative integer", name)
        return Bootstrap(host, port, room)

    def _rid(self, i: int, count: int) -> str:
        """As upstream: one string for a batch is the prefix of per-prompt ids."""
        if isinstance(self.rid, str) and self.is_batch:
            return f"{self.rid}-{i}"
        rid = self._pick("rid", i, count)
        if isinstance(rid, list):  # a list for a single prompt: upstream takes one entry per prompt
            if len(rid) != 1:
                raise InvalidRequestError(f"rid has {len(rid)} entries for 1 prompt", "rid")
            rid = rid[0]
        return rid or uuid.uuid4().hex

    def _prompts(self) -> list[Any]:
        if self.text is not None:
            return list(self.text) if isinstance(self.text, list) else [self.text]
        return list(self.input_ids) if self.is_batch else [self.input_ids]

    def _pick(self, name: str, i: int, count: int, nested: bool = False) -> Any:
        """Field `name` for prompt `i`: a per-prompt list in a batch, else the one value."""
        value = getattr(self, name)
        per_prompt = isinstance(value, list) and (not nested or (value and isinstance(value[0], list)))
        if per_prompt and self.is_batch:
            if len(value) != count:
                raise InvalidRequestError(f"{name} has {len(value)} entries for {count} prompts", name)
            return value[i]
        return value
