"""API speculative execution: several gens served by one API call on a completion backend."""

from __future__ import annotations

from scripted_backend import ScriptedBackend

import sglang as sgl


def test_gens_with_stops_reuse_one_speculated_continuation():
    continuation = " Paris\nPopulation: 2 million\nMotto: Fluctuat"

    @sgl.function(num_api_spec_tokens=64)
    def facts(s):
        s += "City:" + sgl.gen("city", stop="\n") + "\n"
        s += "Population:" + sgl.gen("pop", stop="\n") + "\n"

    backend = ScriptedBackend(lambda p, _: continuation)
    state = facts.run(backend=backend)
    assert (state["city"], state["pop"]) == (" Paris", " 2 million")
    assert state.text() == "City: Paris\nPopulation: 2 million\n"
    (call,) = [v for k, v in backend.calls if k == "generate"]
    assert call[1].stop == [] and call[1].max_new_tokens == 128  # max(own 128, 64), no stop strings


def test_divergent_text_drops_the_speculation():
    @sgl.function(num_api_spec_tokens=16)
    def prog(s):
        s += "A:" + sgl.gen("a", stop="\n") + "\n"
        s += "Different:" + sgl.gen("b", stop="\n")

    backend = ScriptedBackend(lambda p, _: " one\nB: two\n")
    state = prog.run(backend=backend)
    assert state["a"] == " one" and state["b"] == " one"
    assert backend.kinds().count("generate") == 2
