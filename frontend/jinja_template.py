"""A chat template derived from a model's own Hugging Face (jinja) chat template.

The prefix and suffix of a new message are found by rendering the history with and without one
more message whose content is a sentinel: what the template prints between the history and the
sentinel is the prefix, what follows the sentinel is the suffix. This keeps everything the
template does with history (a default system prompt injected before the first user turn, BOS
only at the start, folding the system prompt into the first user turn).

`bos_token` renders as "" unless given: the server's tokenizer adds BOS itself, and a second BOS
in the text would be encoded twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

_SENTINEL = "\x00SGL_CONTENT\x00"


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **kwargs: Any) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kwargs)


def _environment() -> ImmutableSandboxedEnvironment:
    # The same environment settings transformers uses, so templates render as they do there.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


@dataclass
class JinjaChatTemplate:
    source: str
    name: str = "model"
    bos_token: str = ""
    eos_token: str = ""
    stop_str: tuple[str, ...] = ()
    image_token: str = "<image>\n"
    # Any default system prompt is the template's own business (it renders it), never the interpreter's.
    default_system_prompt: str | None = None
    _template: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._template = _environment().from_string(self.source)

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        return self._template.render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
            tools=None,
        )

    def get_prefix_and_suffix(self, role: str, history: list[dict]) -> tuple[str, str]:
        history = [{"role": m["role"], "content": _text_of(m["content"])} for m in history]
        try:
            before = self.render(history) if history else ""
            full = self.render([*history, {"role": role, "content": _SENTINEL}])
        except TemplateError as e:
            raise ValueError(f"the model's chat template rejects a {role!r} message here: {e}") from e
        cut = full.find(_SENTINEL)
        if cut < 0:
            raise ValueError(f"the model's chat template does not print the content of {role!r} messages")
        opening, suffix = full[:cut], full[cut + len(_SENTINEL) :]
        # The history was already emitted; the prefix is what this render adds after it.
        common = 0
        for a, b in zip(before, opening):
            if a != b:
                break
            common += 1
        return opening[common:], suffix


def _text_of(content: Any) -> str:
    """Message content as text (vision messages keep their text parts only)."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))
