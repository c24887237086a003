"""run(stream=True): text_iter over the whole text or one variable, sync and async."""

from __future__ import annotations

import asyncio

import pytest

import sglang as sgl

from .scripted_backend import ScriptedBackend


@sgl.function
def story(s):
    s += "Once:" + sgl.gen("a", max_tokens=8) + "|" + sgl.gen("b")


def streaming_backend(delay: float = 0.005) -> ScriptedBackend:
    return ScriptedBackend(lambda p, _: "abcdefgh", chunk_delay=delay)


def test_text_iter_yields_growing_text_in_pieces():
    backend = streaming_backend()
    state = story.run(backend=backend, stream=True)
    pieces = list(state.text_iter())
    assert "".join(pieces) == "Once:abcdefgh|abcdefgh"
    assert len(pieces) > 2  # incremental, not one final blob
    assert set(backend.kinds()) == {"generate_stream"}


def test_text_iter_of_a_variable_stops_when_it_is_complete():
    state = story.run(backend=streaming_backend(), stream=True)
    pieces = list(state.text_iter("a"))
    assert "".join(pieces) == "abcdefgh" and len(pieces) > 1
    assert state["b"] == "abcdefgh"


def test_text_async_iter():
    async def collect(var):
        state = story.run(backend=streaming_backend(), stream=True)
        return [p async for p in state.text_async_iter(var)]

    assert "".join(asyncio.run(collect(None))) == "Once:abcdefgh|abcdefgh"
    assert "".join(asyncio.run(collect("b"))) == "abcdefgh"


def test_without_stream_text_iter_yields_once():
    state = story.run(backend=streaming_backend())
    assert list(state.text_iter()) == ["Once:abcdefgh|abcdefgh"]
    assert list(state.text_iter("a")) == ["abcdefgh"]


def test_a_failing_stream_ends_the_iterator_with_the_error():
    def reply(prompt, params):
        if "|" in prompt.text:
            raise RuntimeError("stream broke")
        return "abcd"

    state = story.run(backend=ScriptedBackend(reply), stream=True)
    seen = []
    with pytest.raises(sgl.ProgramError, match="stream broke"):
        for piece in state.text_iter():
            seen.append(piece)
    assert "".join(seen).startswith("Once:abcd")
