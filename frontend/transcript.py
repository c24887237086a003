"""The text and chat messages of one program stream, and how role markers render into them.

Shared by the interpreter (which executes a stream) and the prefix extractor (which renders the
constant start of a traced program), so that both produce byte-identical prompt text.

Invariants:
- `text` only grows, except where `replace_tail` rewrites the text of the open message.
- Roles do not nest: `begin_role` with a role open raises; `end_role` closes the open role.
- A completed message's content is the text written inside its role, leading whitespace stripped.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from sglang.frontend.chat_template import ChatTemplateLike


@dataclass(frozen=True)
class ImageData:
    path: str
    base64: str


@dataclass
class Transcript:
    template: ChatTemplateLike
    text: str = ""
    messages: list[dict] = field(default_factory=list)
    role: str | None = None
    role_begin: int = 0
    images: list[ImageData] = field(default_factory=list)
    role_images: list[ImageData] = field(default_factory=list)

    def fill(self, value: str) -> None:
        self.text += value

    def replace_tail(self, old: str, new: str) -> bool:
        """Rewrite the last `old` at the end of the text as `new`; False when the text does not end with it."""
        if not self.text.endswith(old):
            return False
        self.text = self.text[: len(self.text) - len(old)] + new
        return True

    def begin_role(self, role: str) -> None:
        if self.role is not None:
            raise ValueError(f"cannot open a {role!r} message inside the open {self.role!r} message")
        system = self.template.default_system_prompt
        if not self.messages and role != "system" and system:
            self.begin_role("system")
            self.fill(system)
            self.end_role("system")
        prefix, _ = self.template.get_prefix_and_suffix(role, self.messages)
        self.role = role
        self.fill(prefix)
        self.role_begin = len(self.text)

    def end_role(self, role: str) -> None:
        if self.role != role:
            raise ValueError(f"closing a {role!r} message but the open message is {self.role!r}")
        content = self.text[self.role_begin :].lstrip()
        _, suffix = self.template.get_prefix_and_suffix(role, self.messages)
        self.fill(suffix)
        if self.role_images:
            # OpenAI vision message format: the text part, then one image_url part per image.
            parts: list[dict] = [{"type": "text", "text": content}]
            parts += [
                {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{im.base64}"}}
                for im in self.role_images
            ]
            self.messages.append({"role": role, "content": parts})
            self.role_images = []
        else:
            self.messages.append({"role": role, "content": content})
        self.role = None

    def add_image(self, image: ImageData) -> None:
        self.images.append(image)
        self.role_images.append(image)
        self.fill(self.template.image_token)

    @property
    def role_text(self) -> str:
        """Text written so far inside the open message ("" when none is open)."""
        return self.text[self.role_begin :] if self.role is not None else ""

    def copy(self) -> Transcript:
        return Transcript(
            template=self.template,
            text=self.text,
            messages=copy.deepcopy(self.messages),
            role=self.role,
            role_begin=self.role_begin,
            images=list(self.images),
            role_images=list(self.role_images),
        )
