"""Chat templates: which Jinja template renders a conversation, and rendering it.

The template is `--chat-template` when given (a name from `NAMED_TEMPLATES` or a Jinja file),
else the model's own (from its tokenizer files or GGUF metadata). Rendering goes through the
tokenizer's `apply_chat_template`, so templates see exactly what they see under transformers
(`bos_token`, `raise_exception`, `tools`, ...). The rendered text already holds every special
token the template wants, so it is tokenized without adding any (`prompt_ids`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
from jinja2.sandbox import ImmutableSandboxedEnvironment

NAMED_TEMPLATES: dict[str, str] = {
    "chatml": (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    "llama-3": (
        "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
        "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
    ),
    # No markers at all: the messages' contents, one per line (base models, debugging).
    "plain": "{% for m in messages %}{{ m['content'] }}\n{% endfor %}",
}
NAMED_TEMPLATES["llama-3-instruct"] = NAMED_TEMPLATES["llama-3"]


class ChatTemplateError(ValueError):
    """No usable chat template: unknown name, unreadable file, or none configured."""


@functools.lru_cache(maxsize=8)
def resolve_chat_template(spec: str | None, model_template: str | None) -> str:
    """The Jinja source to render chats with. `spec` (`--chat-template`) is a name from
    `NAMED_TEMPLATES` or the path of a Jinja file; without it, the model's own template.
    Raises ChatTemplateError when neither gives one (the server can call this at startup)."""
    if spec is None:
        if model_template is None:
            raise ChatTemplateError(
                "the model has no chat template; start the server with --chat-template "
                f"(one of {', '.join(sorted(NAMED_TEMPLATES))}, or a Jinja file)"
            )
        return model_template
    if spec in NAMED_TEMPLATES:
        return NAMED_TEMPLATES[spec]
    path = Path(spec)
    if not path.is_file():
        known = ", ".join(sorted(NAMED_TEMPLATES))
        raise ChatTemplateError(f"chat template {spec!r} is neither a known name ({known}) nor a file")
    return path.read_text()


@functools.lru_cache(maxsize=8)
def supports_tools(template: str) -> bool:
    """Whether the template reads the `tools` variable, i.e. describes tools to the model itself."""
    try:
        parsed = ImmutableSandboxedEnvironment().parse(template)
    except jinja2.TemplateSyntaxError:
        return False  # rendering will report the error
    return "tools" in jinja2.meta.find_undeclared_variables(parsed)


def render_chat(
    tokenizer: Any,
    template: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    continue_final_message: bool = False,
    template_kwargs: dict[str, Any] | None = None,
) -> str:
    """The prompt text for `messages`, opening the assistant's turn (or, with
    `continue_final_message`, leaving the last assistant message open for the model to go on).
    Raises ChatTemplateError when the template rejects the conversation."""
    try:
        text = tokenizer.apply_chat_template(
            messages,
            chat_template=template,
            tools=tools,
            tokenize=False,
            add_generation_prompt=not continue_final_message,
            continue_final_message=continue_final_message,
            **(template_kwargs or {}),
        )
    except (jinja2.TemplateError, ValueError, TypeError) as e:
        raise ChatTemplateError(f"the chat template cannot render these messages: {e}") from None
    assert isinstance(text, str)
    return text


def prompt_ids(tokenizer: Any, text: str) -> list[int]:
    """`text` as token ids, adding no special tokens (the template placed them)."""
    return list(tokenizer.encode(text, add_special_tokens=False))
