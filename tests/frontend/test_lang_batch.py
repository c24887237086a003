"""run_batch: input order, generator style, positional items, progress bar, errors, cache warm-up."""

from __future__ import annotations

import random
import threading
import time

import pytest

import sglang as sgl

from .scripted_backend import ScriptedBackend

PREAMBLE = "You are a terse assistant; reply with one word only, no punctuation at all.\n"


@sgl.function
def echo(s, x):
    s += PREAMBLE + "Input: " + x + "\nOutput:" + sgl.gen("y")


def jittery(prompt, params):
    time.sleep(random.uniform(0, 0.01))  # programs finish out of order
    return prompt.text.split("Input: ")[1].split("\n")[0].upper()


def test_results_keep_input_order():
    items = [{"x": f"w{i}"} for i in range(40)]
    states = echo.run_batch(items, backend=ScriptedBackend(jittery), num_threads=8)
    assert [s["y"] for s in states] == [f"W{i}" for i in range(40)]


def test_positional_items_and_mismatch():
    states = echo.run_batch([("a",), ("b",)], backend=ScriptedBackend(jittery))
    assert [s["y"] for s in states] == ["A", "B"]
    with pytest.raises(TypeError, match="does not match"):
        echo.run_batch([("a", "extra")], backend=ScriptedBackend(jittery))


def test_generator_style_yields_before_the_batch_finishes():
    gate = threading.Event()

    def reply(prompt, params):
        if "w0" not in prompt.text:
            gate.wait(5)
        return "done"

    items = [{"x": f"w{i}"} for i in range(6)]
    gen = echo.run_batch(items, backend=ScriptedBackend(reply), num_threads=2, generator_style=True)
    first = next(gen)  # would block until the gate opens if results were collected first
    assert "w0" in first.text()
    gate.set()
    assert len([first, *gen]) == 6


def test_progress_bar_counts_every_program(capsys):
    echo.run_batch([{"x": "a"}, {"x": "b"}, {"x": "c"}], backend=ScriptedBackend(jittery), progress_bar=True)
    assert "3/3" in capsys.readouterr().err


def test_body_error_propagates_from_run_batch():
    @sgl.function
    def picky(s, x):
        if x == "bad":
            raise ValueError("bad input")
        s += x

    with pytest.raises(ValueError, match="bad input"):
        picky.run_batch([{"x": "ok"}, {"x": "bad"}, {"x": "ok"}], backend=ScriptedBackend())


def test_backend_error_stays_in_its_state():
    def reply(prompt, params):
        if "bad" in prompt.text:
            raise RuntimeError("no")
        return "fine"

    ok, bad = echo.run_batch([{"x": "good"}, {"x": "bad"}], backend=ScriptedBackend(reply))
    assert ok["y"] == "fine"
    assert isinstance(bad.error(), RuntimeError)
    with pytest.raises(sgl.ProgramError):
        bad["y"]


def test_constant_prefix_is_cached_once_before_the_programs():
    backend = ScriptedBackend(jittery)
    echo.run_batch([{"x": "a"}, {"x": "b"}], backend=backend)
    assert backend.calls[0] == ("cache_prefix", PREAMBLE + "Input: ")
    assert backend.kinds().count("cache_prefix") == 1


def test_short_prefixes_and_single_programs_are_not_cached():
    @sgl.function
    def short(s, x):
        s += "Q: " + x + sgl.gen("y")

    backend = ScriptedBackend()
    short.run_batch([{"x": "a"}, {"x": "b"}], backend=backend)
    echo.run_batch([{"x": "a"}], backend=backend)
    assert "cache_prefix" not in backend.kinds()


def test_empty_batch():
    assert echo.run_batch([], backend=ScriptedBackend()) == []
