"""API speculative execution: several gens served by one API call on a completion backend."""

from __future__ import annotations

import pytest

import sglang as sgl

from .scripted_backend import ScriptedBackend


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


def chat_backend(reply):
    return ScriptedBackend(reply, is_chat_model=True, chat_template=sgl.get_chat_template("chatml"))


def test_chat_turn_is_one_call_matched_against_the_program():
    @sgl.function(num_api_spec_tokens=64)
    def profile(s):
        s += sgl.user("Describe Paris.")
        with s.assistant():
            s += "Name:" + sgl.gen("name", stop="\n") + "\n"
            s += "Country:" + sgl.gen("country", stop="\n")

    backend = chat_backend(lambda p, _: "Name: Paris\nCountry: France")
    state = profile.run(backend=backend)
    assert (state["name"], state["country"]) == (" Paris", " France")
    assert state.messages()[-1] == {"role": "assistant", "content": "Name: Paris\nCountry: France"}
    (prompt, params) = next(v for k, v in backend.calls if k == "generate")
    assert backend.kinds().count("generate") == 1
    assert prompt.role == "assistant" and prompt.role_text == "" and params.stop == []


def test_chat_turn_that_never_matches_is_reported_after_retries():
    @sgl.function(num_api_spec_tokens=16)
    def profile(s):
        s += sgl.user("Q")
        with s.assistant():
            s += "Name:" + sgl.gen("name", stop="\n") + "\nAge:" + sgl.gen("age")

    backend = chat_backend(lambda p, _: "I would rather not say.")
    state = profile.run(backend=backend)
    with pytest.raises(sgl.ProgramError, match="did not match"):
        state["name"]
    assert backend.kinds().count("generate") == 3


def test_reading_a_speculated_variable_inside_its_turn_is_an_error_not_a_hang():
    @sgl.function(num_api_spec_tokens=16)
    def profile(s):
        s += sgl.user("Q")
        with s.assistant():
            s += sgl.gen("name", stop="\n")
            s += "again " + s["name"]

    with pytest.raises(RuntimeError, match="speculative assistant turn"):
        profile.run(backend=chat_backend(lambda p, _: "Ann\n"))
