"""Chat templates: how role markers (`sgl.user(...)`, `with s.assistant():`) become prompt text.

A template answers one question, `get_prefix_and_suffix(role, history)`: the text that opens and
closes a message of `role` given the messages already completed. Named templates are tables of
(prefix, suffix) per role; `JinjaChatTemplate` (jinja_template.py) derives the same answer from a
model's own Hugging Face template.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol


class ChatTemplateLike(Protocol):
    name: str
    default_system_prompt: str | None
    stop_str: tuple[str, ...]
    image_token: str

    def get_prefix_and_suffix(self, role: str, history: list[dict]) -> tuple[str, str]: ...


class ChatTemplateStyle(Enum):
    PLAIN = "plain"
    LLAMA2 = "llama2"  # the system message is folded into the first [INST] block


@dataclass(frozen=True)
class ChatTemplate:
    name: str
    role_prefix_and_suffix: dict[str, tuple[str, str]]
    default_system_prompt: str | None = None
    stop_str: tuple[str, ...] = ()
    image_token: str = "<image>\n"
    style: ChatTemplateStyle = ChatTemplateStyle.PLAIN

    def get_prefix_and_suffix(self, role: str, history: list[dict]) -> tuple[str, str]:
        prefix, suffix = self.role_prefix_and_suffix.get(role, ("", ""))
        if self.style is ChatTemplateStyle.LLAMA2:
            if role == "system" and not history:
                return self.role_prefix_and_suffix["user"][0] + prefix, suffix
            if role == "user" and len(history) == 1 and history[0]["role"] == "system":
                return "", suffix  # the [INST] was opened by the system message
        return prefix, suffix


_CHATML = {
    "system": ("<|im_start|>system\n", "<|im_end|>\n"),
    "user": ("<|im_start|>user\n", "<|im_end|>\n"),
    "assistant": ("<|im_start|>assistant\n", "<|im_end|>\n"),
}

_TEMPLATES: dict[str, ChatTemplate] = {}


def register_chat_template(template: ChatTemplate, *aliases: str) -> None:
    for name in (template.name, *aliases):
        _TEMPLATES[name] = template


register_chat_template(
    ChatTemplate(
        "default",
        {"system": ("SYSTEM:", "\n"), "user": ("USER:", "\n"), "assistant": ("ASSISTANT:", "\n")},
    )
)
register_chat_template(ChatTemplate("chatml", _CHATML, stop_str=("<|im_end|>",)))
register_chat_template(
    ChatTemplate("qwen", _CHATML, default_system_prompt="You are a helpful assistant.", stop_str=("<|im_end|>",))
)
register_chat_template(
    ChatTemplate(
        "llama-3-instruct",
        {
            role: (f"<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>")
            for role in ("system", "user", "assistant")
        },
        stop_str=("<|eot_id|>",),
    ),
    "llama-3",
)
register_chat_template(
    ChatTemplate(
        "llama-2-chat",
        {"system": ("<<SYS>>\n", "\n<</SYS>>\n\n"), "user": ("[INST] ", " [/INST]"), "assistant": ("", " </s><s>")},
        style=ChatTemplateStyle.LLAMA2,
    ),
    "llama-2",
)
register_chat_template(
    ChatTemplate(
        "mistral",
        {
            "system": ("[SYSTEM_PROMPT] ", " [/SYSTEM_PROMPT]"),
            "user": ("[INST] ", " [/INST]"),
            "assistant": ("", " </s><s>"),
        },
    )
)
register_chat_template(
    ChatTemplate(
        "gemma-it",
        {
            "system": ("", ""),
            "user": ("<start_of_turn>user\n", "<end_of_turn>\n"),
            "assistant": ("<start_of_turn>model\n", "<end_of_turn>\n"),
        },
        stop_str=("<end_of_turn>",),
    )
)
register_chat_template(
    ChatTemplate(
        "vicuna_v1.1",
        {"system": ("", " "), "user": ("USER:", " "), "assistant": ("ASSISTANT:", "</s>")},
        default_system_prompt=(
            "A chat between a curious user and an artificial intelligence assistant. "
            "The assistant gives helpful, detailed, and polite answers to the user's questions."
        ),
    )
)
register_chat_template(
    ChatTemplate("claude", {"system": ("", ""), "user": ("\n\nHuman: ", ""), "assistant": ("\n\nAssistant:", "")})
)


def get_chat_template(name: str) -> ChatTemplate:
    try:
        return _TEMPLATES[name]
    except KeyError:
        raise ValueError(f"unknown chat template {name!r}; known: {', '.join(sorted(_TEMPLATES))}") from None


# (substrings that must all appear in the lower-cased model path, template name), first match wins.
_PATH_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("llama-3", "instruct"), "llama-3-instruct"),
    (("llama3", "instruct"), "llama-3-instruct"),
    (("llama-2", "chat"), "llama-2-chat"),
    (("qwen",), "qwen"),
    (("mistral", "instruct"), "mistral"),
    (("mixtral", "instruct"), "mistral"),
    (("gemma", "-it"), "gemma-it"),
    (("vicuna",), "vicuna_v1.1"),
    (("smollm", "instruct"), "chatml"),
    (("claude",), "claude"),
    (("gpt-",), "chatml"),
)


def get_chat_template_by_model_path(model_path: str) -> ChatTemplate:
    """Guess a named template from a model's path or name; "default" when nothing matches."""
    path = model_path.lower()
    for needles, name in _PATH_RULES:
        if all(n in path for n in needles):
            return _TEMPLATES[name]
    return _TEMPLATES["default"]
