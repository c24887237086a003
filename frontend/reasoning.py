"""`separate_reasoning`: split a reasoning model's output into its thinking and its answer.

A model type names the markers around the thinking. "Forced" types (deepseek-r1) may omit the
opening marker because the chat template already opened it, so everything before the closing
marker is reasoning. Without a closing marker, a forced type's whole output is reasoning (it was
cut off mid-thought); an unforced type's output is all answer unless it opened a thought.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReasoningFormat:
    start: str
    end: str
    forced: bool


_FORMATS: dict[str, ReasoningFormat] = {
    "deepseek-r1": ReasoningFormat("<think>", "</think>", forced=True),
    "qwen3": ReasoningFormat("<think>", "</think>", forced=False),
    "qwen3-thinking": ReasoningFormat("<think>", "</think>", forced=True),
    "glm45": ReasoningFormat("<think>", "</think>", forced=False),
    "kimi": ReasoningFormat("◁think▷", "◁/think▷", forced=False),
    "step3": ReasoningFormat("<think>", "</think>", forced=True),
}
DEFAULT_MODEL_TYPE = "deepseek-r1"


def reasoning_var_name(name: str) -> str:
    return f"{name}_reasoning_content"


def split_reasoning(text: str, model_type: str | None = None) -> tuple[str, str]:
    """(reasoning, answer) of `text`, both stripped of the markers and surrounding whitespace."""
    try:
        fmt = _FORMATS[model_type or DEFAULT_MODEL_TYPE]
    except KeyError:
        raise ValueError(f"unknown reasoning model type {model_type!r}; known: {', '.join(sorted(_FORMATS))}") from None
    body = text.lstrip()
    opened = body.startswith(fmt.start)
    if opened:
        body = body[len(fmt.start) :]
    elif not fmt.forced:
        return "", text
    reasoning, closed, answer = body.partition(fmt.end)
    if not closed:
        return body.strip(), ""
    return reasoning.strip(), answer.strip()
