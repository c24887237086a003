"""The grammar that forces a tool call (tool_choice "required" or a named function).

The forced output is plain JSON, which every `--tool-call-parser` setting reads the same way
(`sglang.runtime.parsers.tool_formats.PlainJson`); the formats themselves live in
`sglang.runtime.parsers`. `CALL_START` is the Hermes tag that tools described in the system
prompt (models whose chat template knows no tools) are told to write.
"""

from __future__ import annotations

import json
from typing import Any

CALL_START = "<tool_call>"


def forced_call_schema(tools: list[dict[str, Any]], named: str | None, parallel: bool) -> str:
    """The JSON schema (for xgrammar) that makes the output a call in the plain format:
    one object calling `named`, or (tool_choice "required") a list of calls to any of `tools`,
    at least one, at most one unless `parallel`."""

    def call_schema(function: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "name": {"const": function["name"]},
                "arguments": function.get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
        }

    functions = [tool["function"] for tool in tools]
    if named is not None:
        return json.dumps(call_schema(next(f for f in functions if f["name"] == named)))
    schema: dict[str, Any] = {"type": "array", "items": {"anyOf": [call_schema(f) for f in functions]}, "minItems": 1}
    if not parallel:
        schema["maxItems"] = 1
    return json.dumps(schema)
