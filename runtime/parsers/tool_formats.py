"""Tool-call formats: where each model family writes its calls, read from text that may stop anywhere.

A format's `scan(text)` returns where the content ends (the calls section starts; the whole text
when there is none) and the calls as far as they are written (`json_scan.CallScan`). The same
scan serves a finished output and one still streaming; `tool_stream.ToolCallStream` turns
successive scans into OpenAI deltas and decides which calls are valid. `markers` are the strings
that open a calls section: text that ends in a piece of one is held back from the content.

Formats (upstream's `--tool-call-parser` names in `TOOL_CALL_PARSERS`):
- hermes / qwen25 / qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks;
- llama3: `<|python_tag|>` (or a bare `{` at the start) and call objects separated by `;`;
- mistral: `[TOOL_CALLS] [{...}, ...]`, or the compact `[TOOL_CALLS]name[ARGS]{...}`;
- deepseekv3: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>name` and a ```json block, per call;
- pythonic: `[f(a=1), g(b="x")]` (Python call syntax, read with `ast`);
- gpt-oss: Harmony messages addressed `to=functions.name`;
- plain JSON: the whole output one call object or a list of them: what `tool_choice` required
  or a named function makes the model write (`forced_call_schema`); also the fallback of the
  default format (hermes, else plain JSON) used when no `--tool-call-parser` is given.
"""

from __future__ import annotations

import ast
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass

from sglang.runtime.parsers.json_scan import CallScan, scan_call_object, skip_ws, value_end


@dataclass(frozen=True)
class Scan:
    content_end: int
    calls: list[CallScan]


def _objects(text: str, j: int, separator: str, close: str | None = None) -> list[CallScan]:
    """Call objects from `text[j]` on, separated by `separator`, until `close` or anything else."""
    calls: list[CallScan] = []
    while True:
        j = skip_ws(text, j)
        if j >= len(text) or text[j] != "{":
            return calls
        call = scan_call_object(text, j)
        calls.append(call)
        if call.end is None:
            return calls
        j = skip_ws(text, call.end)
        if not text.startswith(separator, j) or (close is not None and text.startswith(close, j)):
            return calls
        j += len(separator)


class ToolFormat(ABC):
    markers: tuple[str, ...] = ()

    @abstractmethod
    def scan(self, text: str) -> Scan: ...


class PlainJson(ToolFormat):
    """The whole output is a call object or a list of them; text after it is dropped."""

    def scan(self, text: str) -> Scan:
        j = skip_ws(text, 0)
        if j >= len(text):
            return Scan(0, [])  # nothing but whitespace yet: may still become a call
        if text[j] == "{":
            return Scan(0, _objects(text, j, separator="\0"))
        if text[j] == "[":
            return Scan(0, _objects(text, j + 1, ",", close="]"))
        return Scan(len(text), [])


class TaggedJson(ToolFormat):
    """Hermes/Qwen 2.5: one call object per `<tool_call>` block, text before the first block is
    content; a block that holds no object is skipped."""

    def __init__(self, open_tag: str = "<tool_call>") -> None:
        self.open_tag = open_tag
        self.markers = (open_tag,)

    def scan(self, text: str) -> Scan:
        start = text.find(self.open_tag)
        if start < 0:
            return Scan(len(text), [])
        calls, pos = [], start
        while pos >= 0:
            j = skip_ws(text, pos + len(self.open_tag))
            if j >= len(text):
                break
            if text[j] == "{":
                call = scan_call_object(text, j)
                calls.append(call)
                if call.end is None:
                    break
                j = call.end
            pos = text.find(self.open_tag, j)
        return Scan(start, calls)


class HermesOrPlain(ToolFormat):
    """The default: Hermes blocks when the output has one, else plain JSON."""

    hermes, plain = TaggedJson(), PlainJson()
    markers = hermes.markers

    def scan(self, text: str) -> Scan:
        if self.hermes.open_tag in text:
            return self.hermes.scan(text)
        return self.plain.scan(text)


class Llama3(ToolFormat):
    markers = ("<|python_tag|>",)

    def scan(self, text: str) -> Scan:
        tag = text.find(self.markers[0])
        if tag >= 0:
            return Scan(tag, _objects(text, tag + len(self.markers[0]), ";"))
        j = skip_ws(text, 0)
        if j >= len(text) or text[j] == "{":
            return Scan(0, _objects(text, j, ";"))
        return Scan(len(text), [])


class Mistral(ToolFormat):
    markers = ("[TOOL_CALLS]",)
    ARGS = "[ARGS]"

    def scan(self, text: str) -> Scan:
        start = text.find(self.markers[0])
        if start < 0:
            return Scan(len(text), [])
        j = skip_ws(text, start + len(self.markers[0]))
        if j < len(text) and text[j] == "[":
            return Scan(start, _objects(text, j + 1, ",", close="]"))
        calls = []
        while j < len(text):  # compact: name[ARGS]{...}, each call after its own [TOOL_CALLS]
            k = text.find(self.ARGS, j)
            if k < 0:
                break
            args_at = skip_ws(text, k + len(self.ARGS))
            end = value_end(text, args_at)
            calls.append(CallScan(text[j:k].strip(), text[args_at : end or len(text)], end is not None, end))
            if end is None:
                break
            j = skip_ws(text, end)
            if text.startswith(self.markers[0], j):
                j += len(self.markers[0])
        return Scan(start, calls)


class DeepSeekV3(ToolFormat):
    markers = ("<｜tool▁calls▁begin｜>",)
    CALL, SEP, FENCE = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "```json"

    def scan(self, text: str) -> Scan:
        start = text.find(self.markers[0])
        if start < 0:
            return Scan(len(text), [])
        calls, pos = [], text.find(self.CALL, start)
        while pos >= 0:
            sep = text.find(self.SEP, pos)
            line_end = text.find("\n", sep) if sep >= 0 else -1
            if line_end < 0:
                break
            name = text[sep + len(self.SEP) : line_end].strip()
            fence = skip_ws(text, line_end)
            if not text.startswith(self.FENCE, fence):
                calls.append(CallScan(name, "", False, None))
                break
            args_at = skip_ws(text, fence + len(self.FENCE))
            end = value_end(text, args_at)
            calls.append(CallScan(name, text[args_at : end or len(text)], end is not None, end))
            if end is None:
                break
            pos = text.find(self.CALL, end)
        return Scan(start, calls)


class Pythonic(ToolFormat):
    """`[name(key=literal, ...), ...]`, optionally inside `<|python_start|>`/`<|python_end|>`.
    Calls are known only once the list closes (Python literals are not streamable as JSON)."""

    markers = ("<|python_start|>",)

    def scan(self, text: str) -> Scan:
        j = skip_ws(text, 0)
        if text.startswith(self.markers[0], j):
            j = skip_ws(text, j + len(self.markers[0]))
        if j >= len(text) or self.markers[0].startswith(text[j:]):
            return Scan(0, [])
        if text[j] != "[":
            return Scan(len(text), [])
        end = value_end(text, j, python=True)
        calls = None if end is None else self._calls(text[j:end], end)
        return Scan(0, calls or [])

    @staticmethod
    def _calls(source: str, end: int) -> list[CallScan] | None:
        try:
            tree = ast.parse(source, mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # hostile nesting included
            return None
        if not isinstance(tree, ast.List) or not all(isinstance(e, ast.Call) for e in tree.elts):
            return None
        calls = []
        for call in tree.elts:
            assert isinstance(call, ast.Call)
            try:
                kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
                arguments = json.dumps(kwargs, ensure_ascii=False)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                arguments = ""
            name = ast.unparse(call.func) if not call.args else None  # positional args: no call
            calls.append(CallScan(name, arguments, bool(arguments), end))
        return calls


class GptOss(ToolFormat):
    """Harmony messages whose header says `to=functions.NAME`; arguments follow `<|message|>`."""

    markers = ("<|channel|>", "<|start|>")
    TO, MESSAGE = "to=functions.", "<|message|>"

    def scan(self, text: str) -> Scan:
        calls, content_end, pos = [], len(text), text.find(self.TO)
        while pos >= 0:
            start, channel = text.rfind(self.markers[1], 0, pos), text.rfind(self.markers[0], 0, pos)
            opener = start if start >= 0 and self.MESSAGE not in text[start:pos] else channel
            content_end = min(content_end, opener if opener >= 0 else pos)
            message = text.find(self.MESSAGE, pos)
            if message < 0:
                break
            name = text[pos + len(self.TO) : message].split("<|")[0].split()[0]
            args_at = skip_ws(text, message + len(self.MESSAGE))
            end = value_end(text, args_at)
            calls.append(CallScan(name, text[args_at : end or len(text)], end is not None, end))
            if end is None:
                break
            pos = text.find(self.TO, end)
        if not calls and pos < 0:
            after = text.rfind(self.MESSAGE) + 1  # a header still open may address a function
            opens = [i for m in self.markers if (i := text.find(m, after)) >= 0]
            return Scan(min(opens, default=len(text)), [])
        return Scan(content_end, calls)


_HERMES = TaggedJson()
TOOL_CALL_PARSERS: dict[str, ToolFormat] = {
    "hermes": _HERMES,
    "qwen25": _HERMES,
    "qwen": _HERMES,
    "llama3": Llama3(),
    "mistral": Mistral(),
    "deepseekv3": DeepSeekV3(),
    "pythonic": Pythonic(),
    "gpt-oss": GptOss(),
}
"""`--tool-call-parser` names (upstream's) -> format."""

DEFAULT_FORMAT: ToolFormat = HermesOrPlain()
FORCED_FORMAT: ToolFormat = PlainJson()


def tool_format(name: str | None) -> ToolFormat:
    """The format for `--tool-call-parser NAME` (the default one for None); ValueError if unknown."""
    if name is None:
        return DEFAULT_FORMAT
    try:
        return TOOL_CALL_PARSERS[name]
    except KeyError:
        raise ValueError(f"unknown tool-call parser {name!r}; known: {', '.join(sorted(TOOL_CALL_PARSERS))}") from None
