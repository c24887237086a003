"""Parsers of model output: reasoning (`reasoning`, `harmony`) and tool calls (`tool_formats`,
`tool_stream`, reading partial JSON with `json_scan`), registered by upstream SGLang's
`--reasoning-parser` / `--tool-call-parser` names. Pure text in, text out: no server, tokenizer
or model, so every API (OpenAI chat, Anthropic messages, ...) can use them.
"""

from sglang.runtime.parsers.reasoning import (
    REASONING_PARSERS,
    ReasoningDelta,
    ReasoningParser,
    reasoning_parser,
    separate_reasoning,
)
from sglang.runtime.parsers.tool_formats import TOOL_CALL_PARSERS, ToolFormat, tool_format
from sglang.runtime.parsers.tool_stream import ParsedOutput, ToolCallStream, ToolDelta, parse_tool_calls

__all__ = [
    "REASONING_PARSERS",
    "TOOL_CALL_PARSERS",
    "ParsedOutput",
    "ReasoningDelta",
    "ReasoningParser",
    "ToolCallStream",
    "ToolDelta",
    "ToolFormat",
    "parse_tool_calls",
    "reasoning_parser",
    "separate_reasoning",
    "tool_format",
]
