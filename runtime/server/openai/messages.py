"""Chat messages as a chat template sees them, tools included.

Content parts are flattened to one string (text-only model), `developer` becomes `system`.
Tools reach the model in one of two ways:
- the template reads `tools` (Qwen, Hermes, Llama 3.1, ...): the tool list goes to the template,
  and earlier tool calls and results stay structured messages for it to render;
- otherwise (SmolLM2, ChatML, ...): a system prompt describes the tools and the `<tool_call>`
  format that `tool_calls.parse_tool_calls` reads; earlier calls are written back into the
  assistant's text in that format, and tool results become user turns in `<tool_response>`
  tags, a role every template knows.
"""

from __future__ import annotations

import json
from typing import Any

from sglang.runtime.server.openai.protocol import ChatMessage
from sglang.runtime.server.openai.tool_calls import CALL_START

_TOOLS_PROMPT = """# Tools

You may call one or more functions to help with the user's request.

The functions you may call are described within <tools></tools> tags:
<tools>
{tools}
</tools>

To call a function, reply with a JSON object holding its name and arguments within \
<tool_call></tool_call> tags, one block per call:
<tool_call>
{{"name": <function-name>, "arguments": <arguments-json-object>}}
</tool_call>"""


def tools_prompt(tools: list[dict[str, Any]]) -> str:
    """The system prompt text that describes `tools` (OpenAI tool objects as JSON) to a model
    whose template cannot."""
    listed = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return _TOOLS_PROMPT.format(tools=listed)


def _arguments(raw: str) -> Any:
    # Templates render arguments as objects (`| tojson`); a string would be encoded twice.
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _structured(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "system" if message.role == "developer" else message.role}
    out["content"] = message.text()
    if message.name is not None:
        out["name"] = message.name
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": _arguments(call.function.arguments)},
            }
            for call in message.tool_calls
        ]
    return out


def _as_text(message: ChatMessage) -> dict[str, Any]:
    out = _structured(message)
    if message.role == "tool":
        return {"role": "user", "content": f"<tool_response>\n{out['content']}\n</tool_response>"}
    calls = out.pop("tool_calls", [])
    blocks = [
        f"{CALL_START}\n{json.dumps(call['function'], ensure_ascii=False)}\n</tool_call>"  # the parsed format
        for call in calls
    ]
    out["content"] = "\n".join(part for part in [out["content"], *blocks] if part)
    return out


def template_messages(
    messages: list[ChatMessage], tools: list[dict[str, Any]] | None, native_tools: bool
) -> list[dict[str, Any]]:
    """The messages to render. `tools` are those the model is told about, as OpenAI tool
    objects (None when it is told of none); `native_tools`: the template renders tools and
    tool messages itself."""
    if native_tools:
        return [_structured(m) for m in messages]
    out = [_as_text(m) for m in messages]
    if tools:
        prompt = tools_prompt(tools)
        if out and out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{prompt}" if out[0]["content"] else prompt
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out
