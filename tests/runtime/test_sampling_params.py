"""SamplingParams: SGLang defaults, strict parsing, range validation naming the field, normalize."""

import pytest

from sglang.runtime.requests.sampling_params import TOP_K_ALL, SamplingParams, SamplingParamsError

VOCAB = 100


def test_defaults_are_sglangs():
    p = SamplingParams()
    assert (p.max_new_tokens, p.min_new_tokens, p.temperature, p.top_p, p.top_k, p.min_p) == (128, 0, 1.0, 1.0, -1, 0.0)
    assert (p.frequency_penalty, p.presence_penalty, p.repetition_penalty) == (0.0, 0.0, 1.0)
    assert (p.stop, p.stop_token_ids, p.ignore_eos, p.n, p.seed) == (None, None, False, 1, None)
    assert p.skip_special_tokens and p.spaces_between_special_tokens and not p.no_stop_trim
    assert (p.logit_bias, p.json_schema, p.regex, p.ebnf) == (None, None, None, None)
    p.validate(VOCAB)
    assert SamplingParams.from_dict(None) == p == SamplingParams.from_dict({})


def test_from_dict_parses_and_widens_ints_to_floats():
    p = SamplingParams.from_dict(
        {"temperature": 0, "top_p": 0.5, "stop": ["a", "b"], "logit_bias": {"5": -1}, "max_new_tokens": None}
    )
    assert p.temperature == 0.0 and isinstance(p.temperature, float)
    assert p.logit_bias == {"5": -1.0} and p.stop == ["a", "b"] and p.max_new_tokens is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", "hot"),
        ("top_k", 1.5),
        ("n", True),
        ("max_new_tokens", "10"),
        ("stop", [1]),
        ("stop_token_ids", [1, "2"]),
        ("ignore_eos", 1),
        ("logit_bias", {"1": "x"}),
        ("json_schema", {"type": "object"}),
        ("seed", 1.0),
    ],
)
def test_from_dict_rejects_wrong_types_naming_the_field(field, value):
    with pytest.raises(SamplingParamsError) as info:
        SamplingParams.from_dict({field: value})
    assert info.value.field == field


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(SamplingParamsError, match="unknown") as info:
        SamplingParams.from_dict({"temprature": 0.5})
    assert info.value.field == "temprature"


@pytest.mark.parametrize(
    ("field", "overrides"),
    [
        ("temperature", {"temperature": -0.1}),
        ("temperature", {"temperature": float("nan")}),
        ("top_p", {"top_p": 0.0}),
        ("top_p", {"top_p": 1.01}),
        ("top_k", {"top_k": 0}),
        ("top_k", {"top_k": -2}),
        ("min_p", {"min_p": -0.1}),
        ("min_p", {"min_p": 1.5}),
        ("frequency_penalty", {"frequency_penalty": 2.5}),
        ("presence_penalty", {"presence_penalty": -2.5}),
        ("repetition_penalty", {"repetition_penalty": 0.0}),
        ("repetition_penalty", {"repetition_penalty": 2.1}),
        ("max_new_tokens", {"max_new_tokens": -1}),
        ("min_new_tokens", {"min_new_tokens": -1}),
        ("min_new_tokens", {"min_new_tokens": 5, "max_new_tokens": 4}),
        ("n", {"n": 0}),
        ("stop_token_ids", {"stop_token_ids": [VOCAB]}),
        ("logit_bias", {"logit_bias": {"abc": 1.0}}),
        ("logit_bias", {"logit_bias": {str(VOCAB): 1.0}}),
        ("logit_bias", {"logit_bias": {"-1": 1.0}}),
        ("regex", {"json_schema": "{}", "regex": "a+"}),
        ("ebnf", {"regex": "a+", "ebnf": "root ::= 'a'"}),
        ("json_schema", {"json_schema": "{not json"}),
    ],
)
def test_validate_names_the_out_of_range_field(field, overrides):
    with pytest.raises(SamplingParamsError) as info:
        SamplingParams(**overrides).validate(VOCAB)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_boundary_values_are_valid():
    SamplingParams(
        temperature=0.0,
        top_p=1.0,
        top_k=1,
        min_p=1.0,
        frequency_penalty=-2.0,
        presence_penalty=2.0,
        repetition_penalty=2.0,
        max_new_tokens=0,
        n=1,
        stop_token_ids=[0, VOCAB - 1],
        logit_bias={"0": 5.0, str(VOCAB - 1): -5.0},
        json_schema='{"type": "object"}',
    ).validate(VOCAB)


def test_normalize_makes_stop_a_list_and_zero_temperature_greedy():
    p = SamplingParams(stop="###", temperature=0.0, top_k=50).normalize()
    assert p.stop == ["###"] and p.stop_token_ids == []
    assert p.temperature == 0.0 and p.top_k == 1
    q = SamplingParams(temperature=0.7).normalize()
    assert q.stop == [] and q.temperature == 0.7 and q.top_k == TOP_K_ALL
    assert SamplingParams(stop=["a"], top_k=20).normalize().top_k == 20
    original = SamplingParams(stop="x")
    original.normalize()
    assert original.stop == "x"  # normalize returns a copy


def test_upstream_fields_parse_and_normalize():
    p = SamplingParams.from_dict(
        {"stop_regex": r"\d", "sampling_seed": 4, "stream_interval": 2, "custom_params": {"a": [1]}, "beam_width": 1}
    )
    p.validate(VOCAB)
    q = p.normalize()
    assert q.stop_regex == [r"\d"] and q.seed == 4 and q.sampling_seed is None and q.stream_interval == 2


def test_null_means_default_unless_null_has_a_meaning():
    p = SamplingParams.from_dict({"temperature": None, "n": None, "ignore_eos": None, "max_new_tokens": None})
    assert (p.temperature, p.n, p.ignore_eos) == (1.0, 1, False)
    assert p.max_new_tokens is None  # None: up to the context length


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("beam_width", 2, "beam search"),
        ("structural_tag", "{}", "structural tags"),
        ("watermark", {"key": 1}, "watermarking"),
        ("stop_regex", "(", "invalid pattern"),
        ("stop_regex", ["a"] * 33, "at most 32"),
        ("stream_interval", 0, "at least 1"),
    ],
)
def test_upstream_fields_refused_naming_them(field, value, message):
    with pytest.raises(SamplingParamsError, match=message) as info:
        SamplingParams.from_dict({field: value}).validate(VOCAB)
    assert info.value.field == field
