"""OpenAI request fields -> SGLang `sampling_params`, shared by both endpoints.

Only values the client set are passed on, so every other one keeps SGLang's default and the
validation (types, ranges, vocabulary) stays in `SamplingParams`. At most one grammar constrains a
request; `pick_grammar` says which, or refuses a combination with a 400 naming the field.
`native_names` maps the runtime's names for fields back to the request's, for error messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang.runtime.requests import upstream_fields
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.openai.protocol import SAMPLING_EXTRAS, SamplingFields

Grammar = tuple[str, str]
"""(SGLang grammar field: json_schema | regex | ebnf, its source)."""


@dataclass(frozen=True)
class Constraint:
    """The grammar a request's output follows, and the request field that asked for it."""

    field: str
    kind: str
    source: str


# Fields copied as they are when the client set them (None means "not set").
_PASSED_WHEN_SET = (
    "temperature",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "stop",
    "seed",
    "logit_bias",
    *SAMPLING_EXTRAS,
)


def sampling_params(
    request: SamplingFields, max_new_tokens: int | None, constraint: Constraint | None
) -> dict[str, Any]:
    """The native `sampling_params` for `request`; `max_new_tokens=None` means up to the
    context length, as in SGLang."""
    params: dict[str, Any] = {
        name: getattr(request, name) for name in _PASSED_WHEN_SET if getattr(request, name) is not None
    }
    params.update(max_new_tokens=max_new_tokens, min_new_tokens=request.min_tokens, n=request.n)
    if "sampling_seed" in params and "seed" not in params:
        # One name, so that the per-choice seeds of a streamed n > 1 (`seed + j`) derive from it.
        params["seed"] = params.pop("sampling_seed")
    if constraint is not None:
        params[constraint.kind] = constraint.source
    return params


def refuse_missing(request: SamplingFields) -> None:
    """400 naming the first upstream extra set to a value whose feature this server lacks."""
    refused = upstream_fields.first_refused(
        {name: getattr(request, name) for name in upstream_fields.OPENAI}, upstream_fields.OPENAI
    )
    if refused is not None:
        raise ApiError(400, refused[1], refused[0])


def pick_grammar(candidates: dict[str, Grammar | None]) -> Constraint | None:
    """The one grammar among `candidates` (request field -> grammar it asks for, or None).
    Two or more is a 400 naming the second field: xgrammar applies one grammar per request."""
    given = [(field, grammar) for field, grammar in candidates.items() if grammar is not None]
    if len(given) > 1:
        names = ", ".join(field for field, _ in given)
        raise ApiError(400, f"only one output constraint may be given, got {names}", given[1][0])
    return Constraint(given[0][0], *given[0][1]) if given else None


def native_names(prompt_field: str, constraint: Constraint | None) -> dict[str, str]:
    """The runtime's field names (`sampling_params.` stripped) -> this request's field names,
    where they differ: the prompt, token limits, and the field the grammar came from."""
    names = {"text": prompt_field, "input_ids": prompt_field}
    names.update(max_new_tokens="max_tokens", min_new_tokens="min_tokens")
    if constraint is not None:
        names[constraint.kind] = constraint.field
    return names


def sgl_grammars(request: SamplingFields) -> dict[str, Grammar | None]:
    """The grammars SGLang's own extras ask for."""
    return {
        "regex": None if request.regex is None else ("regex", request.regex),
        "ebnf": None if request.ebnf is None else ("ebnf", request.ebnf),
    }


def check_stream_options(request: SamplingFields) -> bool:
    """Whether the stream ends with a usage chunk; `stream_options` without `stream` is a 400,
    as in OpenAI."""
    if request.stream_options is None:
        return False
    if not request.stream:
        raise ApiError(400, "stream_options is only allowed when stream is true", "stream_options")
    return request.stream_options.include_usage
