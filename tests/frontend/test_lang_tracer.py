"""Tracing (IR without a backend), constant-prefix extraction and compiled execution."""

from __future__ import annotations

import pytest

import sglang as sgl
from sglang.frontend.ir import SglArgument, SglConstantText, SglFork, SglGen, SglJoin, SglRoleBegin, SglVariable
from sglang.frontend.tracer import extract_prefix

from .scripted_backend import ScriptedBackend


@sgl.function
def tips(s, topic):
    s += "Give tips about " + topic + ".\n"
    s += "1." + sgl.gen("tip_1", stop="\n") + "\n"
    forks = s.fork(2)
    forks += lambda i: f"Expand {i}:" + sgl.gen("detail")
    forks.join()
    s += "Summary of " + forks[0]["detail"] + sgl.gen("summary")


def test_trace_builds_the_graph_without_a_backend():
    root = tips.trace()
    kinds = [type(n).__name__ for n in root.nodes]
    assert kinds == [
        "SglConstantText",
        "SglArgument",
        "SglConstantText",
        "SglConstantText",
        "SglGen",
        "SglConstantText",
        "SglFork",
        "SglJoin",
        "SglConstantText",
        "SglVariable",
        "SglGen",
    ]
    assert isinstance(root.nodes[1], SglArgument) and root.nodes[1].name == "topic"
    fork = root.nodes[6]
    assert isinstance(fork, SglFork) and len(fork.children) == 2
    assert [type(n) for n in fork.children[1].nodes] == [SglConstantText, SglGen]
    assert fork.children[1].nodes[0].value == "Expand 1:"
    variable = root.nodes[9]
    assert isinstance(variable, SglVariable) and variable.source is fork.children[0]
    assert isinstance(root.nodes[7], SglJoin) and root.nodes[7].mode == "gather_variable"
    assert "stream 2:" in root.graph_text()


def test_trace_with_given_arguments_uses_their_values():
    root = tips.trace(topic="sleep")
    assert root.nodes[0].value == "Give tips about sleep.\n"  # plain str concatenation: one constant


def test_using_a_placeholder_value_is_a_tracing_error():
    @sgl.function
    def fstring(s, q):
        s += f"Q: {q}"

    @sgl.function
    def branch(s, q):
        s += sgl.gen("x")
        if s["x"] == "yes":
            s += q

    for program in (fstring, branch):
        with pytest.raises(sgl.TracingError):
            program.trace()


def test_prefix_stops_at_the_first_value_not_known_before_running():
    template = sgl.get_chat_template("default")
    assert extract_prefix(tips, template) == "Give tips about "

    @sgl.function
    def chat(s, q, system="Be brief."):
        s += sgl.system("You are a bot.")
        s += sgl.user("Question: " + q)

    assert extract_prefix(chat, template) == "SYSTEM:You are a bot.\nUSER:Question: "
    assert extract_prefix(chat.bind(q="why"), template) == "SYSTEM:You are a bot.\nUSER:Question: why\n"

    @sgl.function
    def fstring(s, q):
        s += "Intro. "
        s += f"Q: {q}"

    assert extract_prefix(fstring, template) == "Intro. "


def test_prefix_renders_the_templates_default_system_prompt():
    @sgl.function
    def chat(s, q):
        s += sgl.user(q)

    vicuna = sgl.get_chat_template("vicuna_v1.1")
    assert extract_prefix(chat, vicuna) == vicuna.default_system_prompt + " USER:"


def test_compiled_run_matches_the_interpreted_run():
    backend = ScriptedBackend(lambda p, _: f"<{len(p.text)}>")
    compiled = tips.compile(backend=backend)
    assert isinstance(compiled.root.nodes[0], SglConstantText)
    expected = tips.run(topic="sleep", backend=backend)
    got = compiled.run(topic="sleep")
    assert got.text() == expected.text()
    assert got["detail"] == expected["detail"] and got["tip_1"] == expected["tip_1"]
    batch = compiled.run_batch([{"topic": "a"}, {"topic": "bb"}])
    assert [s.text() for s in batch] == [tips.run(topic=t, backend=backend).text() for t in ("a", "bb")]


def test_compiled_calls_of_other_functions_and_concatenation():
    @sgl.function
    def expand(s, tip):
        s += "Expand: " + tip + sgl.gen("detail")

    @sgl.function
    def outer(s, topic):
        s += topic + sgl.gen("tip")
        branch = expand(tip=s["tip"])
        parts = s.fork(2)
        parts += lambda i: f"({i})"
        parts.join("concate_and_append")
        s += "Detail: " + branch["detail"]

    backend = ScriptedBackend(lambda p, _: f"<{len(p.text)}>")
    compiled = outer.compile(backend=backend)
    assert any(type(n).__name__ == "SglCall" for n in compiled.root.nodes)
    assert compiled.run(topic="t").text() == outer.run(topic="t", backend=backend).text() == "t<1>(0)(1)Detail: <11>"


def test_compiled_run_requires_every_argument():
    compiled = tips.compile(backend=ScriptedBackend())
    with pytest.raises(TypeError, match="topic"):
        compiled.run()


def test_roles_stay_symbolic_in_the_trace():
    @sgl.function
    def chat(s):
        with s.user():
            s += "hi"

    assert isinstance(chat.trace().nodes[0], SglRoleBegin)
