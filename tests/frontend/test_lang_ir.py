"""IR construction: concatenation, primitives' validation, placeholders, sampling merge."""

from __future__ import annotations

import pytest

import sglang as sgl
from sglang.frontend.errors import TracingError
from sglang.frontend.ir import SglArgument, SglConstantText, SglExprList, SglGen, SglSelect, flatten
from sglang.frontend.sampling_params import REGEX_FLOAT, GenParams, SamplingParams


def test_concatenation_is_flat_and_lifts_strings():
    expr = "a" + sgl.gen("x") + "b" + (sgl.gen("y") + "c")
    assert isinstance(expr, SglExprList)
    assert [type(e) for e in expr.exprs] == [SglConstantText, SglGen, SglConstantText, SglGen, SglConstantText]
    assert [e.value for e in expr.exprs if isinstance(e, SglConstantText)] == ["a", "b", "c"]
    nested = sgl.user("q" + sgl.gen("z"))
    assert [type(e).__name__ for e in flatten(nested)] == [
        "SglRoleBegin",
        "SglConstantText",
        "SglGen",
        "SglRoleEnd",
    ]
    with pytest.raises(TypeError):
        sgl.gen("x") + object()


def test_gen_arguments_become_overrides():
    g = sgl.gen("x", max_tokens=5, min_tokens=1, stop=["\n"], json_schema={"type": "object"})
    assert (g.name, g.params.max_new_tokens, g.params.min_new_tokens) == ("x", 5, 1)
    assert g.params.json_schema == '{"type": "object"}' and g.params.temperature is None
    assert sgl.gen_int("n").params.dtype is int and sgl.gen_string("s").params.dtype is str
    with pytest.raises(Exception, match="unterminated"):
        sgl.gen("bad", regex="(")


def test_select_validation():
    s = sgl.select("c", ["a", "b"])
    assert isinstance(s, SglSelect) and s.choices_method is sgl.token_length_normalized
    with pytest.raises(ValueError, match="non-empty"):
        sgl.select("c", [])
    with pytest.raises(ValueError, match="temperature"):
        sgl.select("c", ["a"], temperature=0.7)


def test_placeholders_refuse_value_use():
    arg = SglArgument("q")
    for use in (str, len, bool, lambda a: f"{a}", lambda a: a == "x", lambda a: list(a)):
        with pytest.raises(TracingError, match="Argument\\(q\\)"):
            use(arg)
    assert isinstance("x" + arg, SglExprList)  # concatenation is fine: it stays symbolic


def test_merged_sampling_params_never_mutate_the_defaults():
    defaults = SamplingParams(stop=["END"], temperature=0.5)
    merged = defaults.merged(GenParams(stop="\n", top_k=4), extra_stop=("<|eot|>",))
    assert merged.stop == ["\n", "<|eot|>"] and merged.top_k == 4 and merged.temperature == 0.5
    assert defaults.stop == ["END"]
    inherit = defaults.merged(GenParams(), extra_stop=("<|eot|>",))
    assert inherit.stop == ["END", "<|eot|>"]
    assert "regex" not in merged.to_srt_kwargs()
    floats = defaults.merged(GenParams(dtype=float, regex="ignored")).to_srt_kwargs()
    assert floats["regex"] == REGEX_FLOAT and floats["stop"] == ["END", " ", "\n"]
    with pytest.raises(ValueError, match="dtype"):
        defaults.merged(GenParams(dtype=list)).to_srt_kwargs()
