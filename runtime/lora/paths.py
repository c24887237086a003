"""`--lora-paths` entries and `/load_lora_adapter` bodies, in upstream's three forms.

An entry is `PATH` (named by the path), `NAME=PATH`, or a JSON object
`{"lora_name": str, "lora_path": str, "pinned": bool}`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sglang.runtime.lora.adapter import LoraError


@dataclass(frozen=True)
class LoraRef:
    name: str
    path: str
    pinned: bool = False

    @classmethod
    def from_json(cls, body: Any) -> LoraRef:
        if not isinstance(body, dict):
            raise LoraError("a LoRA adapter is given as an object with lora_name and lora_path")
        name, path, pinned = body.get("lora_name"), body.get("lora_path"), body.get("pinned", False)
        if not isinstance(name, str) or not name:
            raise LoraError("lora_name must be a non-empty string")
        if not isinstance(path, str) or not path:
            raise LoraError("lora_path must be a non-empty string")
        if not isinstance(pinned, bool):
            raise LoraError("pinned must be a boolean")
        if ":" in name:
            # The OpenAI routes name an adapter as `<base>:<adapter>`.
            raise LoraError(f"lora_name {name!r} must not contain ':'")
        return cls(name, path, pinned)


def parse_lora_path(entry: str) -> LoraRef:
    entry = entry.strip()
    if entry.startswith("{"):
        try:
            body = json.loads(entry)
        except ValueError as e:
            raise LoraError(f"--lora-paths entry {entry!r} is not valid JSON: {e}") from None
        return LoraRef.from_json(body)
    name, sep, path = entry.partition("=")
    return LoraRef.from_json(
        {"lora_name": name, "lora_path": path} if sep else {"lora_name": entry, "lora_path": entry}
    )
