"""A chat template derived from a model's own Hugging Face (jinja) chat template.

The prefix and suffix of a new message are found by rendering the history plus one message whose
content is a sentinel: what the template prints between the text already emitted for the history
and the sentinel is the prefix, what follows the sentinel is the suffix. This keeps everything
the template does with history (a default system prompt injected before the first user turn, BOS
only at the start, the system prompt folded into the first user turn).

`bos_token` renders as "" unless given: the server's tokenizer adds BOS itself, and a second BOS
in the text would be encoded twice.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

_SENTINEL = "\x00SGL_CONTENT\x00"
_PROBE = "\x00SGL_NEXT\x00"


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
    _turn: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._template = _environment().from_string(self.source)
        # Programs of a batch share their turns; rendering each once keeps role markers cheap.
        self._turn = functools.lru_cache(maxsize=4096)(self._turn_uncached)

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        return self._template.render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
            tools=None,
        )

    def get_prefix_and_suffix(self, role: str, history: list[dict]) -> tuple[str, str]:
        return self._turn(tuple((m["role"], _text_of(m["content"])) for m in history), role)

    def _emitted(self, history: tuple[tuple[str, str], ...]) -> str:
        """The text the interpreter emitted for `history`: each message's prefix, content, suffix."""
        if not history:
            return ""
        head, (role, content) = history[:-1], history[-1]
        prefix, suffix = self._turn(head, role)
        return self._emitted(head) + prefix + content + suffix

    def _turn_uncached(self, history: tuple[tuple[str, str], ...], role: str) -> tuple[str, str]:
        messages = [{"role": r, "content": c} for r, c in history] + [{"role": role, "content": _SENTINEL}]
        full = self._render_checked(messages, role)
        if _SENTINEL not in full:
            # Some templates print a message only with the turn after it (llama-2 folds the system
            # prompt into the first user turn): render a probe turn after it.
            full = self._render_checked([*messages, {"role": "user", "content": _PROBE}], role)
            if _SENTINEL not in full:
                raise ValueError(f"the model's chat template does not print the content of {role!r} messages")
        cut = full.index(_SENTINEL)
        opening, rest = full[:cut], full[cut + len(_SENTINEL) :]
        probe = rest.find(_PROBE)
        emitted = self._emitted(history)
        # Normally the history's text is a prefix of this render; if the template rewrites earlier
        # turns, the text already emitted stays and only what differs after it is added.
        start = len(emitted) if opening.startswith(emitted) else _common_prefix_len(emitted, opening)
        return opening[start:], rest[:probe] if probe >= 0 else rest

    def _render_checked(self, messages: list[dict], role: str) -> str:
        try:
            return self.render(messages)
        except TemplateError as e:
            raise ValueError(f"the model's chat template rejects a {role!r} message here: {e}") from e


def _common_prefix_len(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _text_of(content: Any) -> str:
    """Message content as text (vision messages keep their text parts only)."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))
