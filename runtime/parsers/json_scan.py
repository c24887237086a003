"""Reading JSON that is still being written: where a value ends, and call objects in progress.

Tool calls stream while the model writes them, so the parsers need to know, of a text that may
stop anywhere, whether a JSON value starting at some position is complete yet and, if not, how
much of it there is. `value_end` answers that with a string-aware bracket count (no parse);
`scan_call_object` reads `{"name": ..., "arguments": ...}` far enough to know the name and the
arguments' text so far. Both are monotone: more text never changes what an earlier, shorter
text already showed, which is what lets a stream send a prefix of the arguments early.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_WS = " \t\r\n"
_NAME_KEYS = ("name",)
_ARG_KEYS = ("arguments", "parameters")


def skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _specials(quotes: str) -> re.Pattern[str]:
    return re.compile("[" + re.escape(quotes + "\\{}[]") + "]")


_JSON_SPECIALS, _PYTHON_SPECIALS = _specials('"'), _specials("\"'")


def value_end(text: str, i: int, python: bool = False) -> int | None:
    """The index just past the JSON value starting at `text[i]` (no leading whitespace), or None
    while it is incomplete. `python`: a Python literal (strings in single quotes too). Malformed
    values are not detected here; a parse of the slice is. Linear, and the characters between
    quotes and brackets are skipped by the regex engine, since a stream rescans its text at
    every piece."""
    if i >= len(text):
        return None
    if text[i] not in ("{[\"'" if python else '{["'):
        j = i  # a number, true, false or null: complete once something else follows it
        while j < len(text) and text[j] not in _WS + ",}]":
            j += 1
        return j if j < len(text) else None
    specials = _PYTHON_SPECIALS if python else _JSON_SPECIALS
    depth, quote, pos = 0, "", i
    while (match := specials.search(text, pos)) is not None:
        ch, pos = match.group(), match.end()
        if quote:
            if ch == "\\":
                pos += 1  # the escaped character, whatever it is
            elif ch == quote:
                quote = ""
                if depth == 0:
                    return pos  # the value was this string
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return pos
    return None


@dataclass(frozen=True)
class CallScan:
    """A call object as far as it is written. `name`: None until its string is complete;
    `arguments`: the raw text of the arguments value so far ("" before it starts; a JSON string
    of arguments counts only once complete); `end`: index past the object, None while open."""

    name: str | None
    arguments: str
    args_done: bool
    end: int | None


def scan_call_object(text: str, i: int) -> CallScan:
    """Read the call object starting at `text[i]` (which must be `{`)."""
    name, arguments, args_done = None, "", False
    j = i + 1
    while True:
        j = skip_ws(text, j)
        if j >= len(text):
            return CallScan(name, arguments, args_done, None)
        if text[j] == "}":
            return CallScan(name, arguments, args_done, j + 1)
        if text[j] == ",":
            j += 1
            continue
        key_end = value_end(text, j) if text[j] == '"' else None
        if key_end is None:
            return CallScan(name, arguments, args_done, None)
        key = json.loads(text[j:key_end])
        j = skip_ws(text, key_end)
        if j >= len(text) or text[j] != ":":
            return CallScan(name, arguments, args_done, None)
        j = skip_ws(text, j + 1)
        end = value_end(text, j)
        raw = text[j : len(text) if end is None else end]
        if key in _ARG_KEYS:
            arguments, args_done = _arguments_text(raw, end is not None)
        elif key in _NAME_KEYS and end is not None and raw.startswith('"'):
            name = json.loads(raw)
        if end is None:
            return CallScan(name, arguments, args_done, None)
        j = end


def _arguments_text(raw: str, done: bool) -> tuple[str, bool]:
    if not raw.startswith('"'):
        return raw, done
    if not done:
        return "", False  # arguments written as a JSON string: usable only whole
    try:
        return json.loads(raw), True
    except json.JSONDecodeError:
        return "", True


def arguments_object(text: str) -> bool:
    """Whether `text` is a JSON object (what a call's arguments must be)."""
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False
