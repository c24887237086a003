"""Each sampling parameter changes what the embedded model generates, as it should: every test
here would fail if its parameter were ignored. Run on the in-process scheduler (greedy unless a
test says otherwise; several requests of one test share each step)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from sglang.runtime.processes.messages import LogprobRequest
from sglang.runtime.scheduler.req import Req

from .runtime_harness import Runtime, chat_prompt, make_request, token_ids_of

STORY = "Write a story about a dragon."
EOS = 2
IM_START = 1


@pytest.fixture(scope="module")
def france(runtime: Runtime) -> list[int]:
    """Greedy: "The capital of France is Paris." then EOS (8 tokens)."""
    return chat_prompt(runtime.tokenizer)


@pytest.fixture(scope="module")
def story(runtime: Runtime) -> list[int]:
    """An open prompt: at temperature 1 the model's continuations differ from seed to seed."""
    return chat_prompt(runtime.tokenizer, STORY)


@pytest.fixture(scope="module")
def repetitive(runtime: Runtime) -> list[int]:
    """Greedy continues it with a token repeated many times."""
    return token_ids_of(runtime.tokenizer, "apple apple apple apple apple apple")


def outputs(rt: Runtime, prompt: list[int], variants: dict[str, dict], **common) -> dict[str, list[int]]:
    """Output ids of one request per variant (sampling parameters), all run together."""
    requests = [make_request(prompt, rid=name, **{**common, **params}) for name, params in variants.items()]
    return {rid: outcome.output_ids for rid, outcome in rt.run(requests).items()}


def test_temperature_zero_is_greedy_whatever_the_seed(rt: Runtime, story: list[int]) -> None:
    out = outputs(rt, story, {f"seed{s}": {"seed": s} for s in range(3)} | {"noseed": {}}, temperature=0.0)
    assert len(set(map(tuple, out.values()))) == 1


def test_temperature_scales_diversity(rt: Runtime, story: list[int]) -> None:
    seeds = range(4)
    greedy = rt.one(story, max_new_tokens=10).output_ids
    # Greedy's smallest margin here is 0.06 nats: at T=0.005 the runner-up has odds of e^-12.
    cold = outputs(rt, story, {f"cold{s}": {"seed": s} for s in seeds}, temperature=0.005, max_new_tokens=10)
    hot = outputs(rt, story, {f"hot{s}": {"seed": s} for s in seeds}, temperature=1.5, max_new_tokens=10)
    assert all(ids == greedy for ids in cold.values()), "a temperature near 0 samples (almost) greedily"
    assert len(set(map(tuple, hot.values()))) >= 3, "a high temperature gives different outputs per seed"


def test_seed_fixes_the_sample(rt: Runtime, story: list[int]) -> None:
    variants = {"a": {"seed": 11}, "b": {"seed": 11}, "c": {"seed": 12}, "d": {"seed": 13}}
    out = outputs(rt, story, variants, temperature=1.0, max_new_tokens=10)
    again = rt.one(story, temperature=1.0, max_new_tokens=10, seed=11).output_ids
    assert out["a"] == out["b"] == again, "the same seed gives the same tokens, alone or in a batch"
    assert len({tuple(out["a"]), tuple(out["c"]), tuple(out["d"])}) >= 2


def test_top_k_one_is_greedy_and_top_k_bounds_the_rank(rt: Runtime, story: list[int]) -> None:
    greedy = rt.one(story, max_new_tokens=8).output_ids
    top1 = outputs(rt, story, {f"k1-{s}": {"seed": s} for s in range(3)}, temperature=1.5, top_k=1, max_new_tokens=8)
    assert all(ids == greedy for ids in top1.values())
    lp = LogprobRequest(return_logprob=True, top_logprobs_num=3)
    requests = [make_request(story, logprobs=lp, temperature=2.0, top_k=3, seed=s, max_new_tokens=12) for s in range(3)]
    for outcome in rt.run(requests).values():
        for token, top in zip(outcome.output_ids, outcome.meta["output_top_logprobs"]):
            assert token in [t for _, t in top], "top_k=3 sampled a token outside the 3 most likely"


def _mass_above(token: int, top: list[tuple[float, int]]) -> float:
    """Probability of the tokens ranked above `token` in a (sorted) top-logprobs list."""
    ranked = [t for _, t in top]
    assert token in ranked, f"token {token} is not among the {len(top)} most likely"
    return sum(math.exp(lp) for lp, _ in top[: ranked.index(token)])


def test_top_p_keeps_sampling_inside_the_nucleus(rt: Runtime, story: list[int]) -> None:
    greedy = rt.one(story, max_new_tokens=8).output_ids
    tiny = outputs(rt, story, {f"p-{s}": {"seed": s} for s in range(3)}, temperature=1.0, top_p=1e-3, max_new_tokens=8)
    assert all(ids == greedy for ids in tiny.values())
    lp = LogprobRequest(return_logprob=True, top_logprobs_num=40)
    nucleus = {"temperature": 1.0, "top_p": 0.5, "max_new_tokens": 12}
    requests = [make_request(story, logprobs=lp, seed=s, **nucleus) for s in range(3)]
    for outcome in rt.run(requests).values():
        for token, top in zip(outcome.output_ids, outcome.meta["output_top_logprobs"]):
            assert _mass_above(token, top) <= 0.5 + 1e-4


def test_min_p_drops_unlikely_tokens(rt: Runtime, story: list[int]) -> None:
    greedy = rt.one(story, max_new_tokens=8).output_ids
    seeds = {f"m-{s}": {"seed": s} for s in range(3)}
    only_max = outputs(rt, story, seeds, temperature=1.5, min_p=1.0, max_new_tokens=8)
    assert all(ids == greedy for ids in only_max.values())
    lp = LogprobRequest(return_logprob=True, top_logprobs_num=1)
    # At temperature 1 the returned logprobs are those min_p compares against the top token's.
    floor = {"temperature": 1.0, "min_p": 0.2, "max_new_tokens": 12}
    requests = [make_request(story, logprobs=lp, seed=s, **floor) for s in range(3)]
    for outcome in rt.run(requests).values():
        meta = outcome.meta
        for (lp_token, _), top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"]):
            assert lp_token >= top[0][0] + math.log(0.2) - 1e-4, "min_p=0.2 sampled a token under 0.2 x the top one"


@pytest.mark.parametrize("penalty", ["frequency_penalty", "presence_penalty", "repetition_penalty"])
def test_penalties_reduce_repetition(rt: Runtime, repetitive: list[int], penalty: str) -> None:
    value = 1.5 if penalty == "repetition_penalty" else 1.0
    out = outputs(rt, repetitive, {"plain": {}, "penalized": {penalty: value}}, max_new_tokens=16)
    most_plain = Counter(out["plain"]).most_common(1)[0][1]
    most_penalized = Counter(out["penalized"]).most_common(1)[0][1]
    assert out["penalized"] != out["plain"]
    assert most_penalized < most_plain


def test_repetition_penalty_also_covers_prompt_tokens(rt: Runtime, repetitive: list[int]) -> None:
    """CTRL's repetition penalty applies to tokens of the prompt too; frequency and presence
    penalties count generated tokens only."""
    apple = token_ids_of(rt.tokenizer, " apple")[0]
    lp = LogprobRequest(return_logprob=True, token_ids_logprob=(apple,))
    variants = {"plain": {}, "rep": {"repetition_penalty": 2.0}, "freq": {"frequency_penalty": 2.0}}
    requests = [make_request(repetitive, rid=k, logprobs=lp, max_new_tokens=1, **v) for k, v in variants.items()]
    first = {rid: o.meta["output_token_ids_logprobs"][0][0][0] for rid, o in rt.run(requests).items()}
    assert first["rep"] < first["plain"] - 0.5
    assert first["freq"] == pytest.approx(first["plain"], abs=1e-4)


def test_max_new_tokens_bounds_the_output(rt: Runtime, france: list[int]) -> None:
    out = rt.run(
        [
            make_request(france, rid="three", max_new_tokens=3),
            make_request(france, rid="seven", max_new_tokens=7, ignore_eos=True),
        ]
    )
    assert len(out["three"].output_ids) == 3
    assert out["three"].finish_reason == {"type": "length", "length": 3}
    assert len(out["seven"].output_ids) == 7


def test_min_new_tokens_suppresses_eos_and_stops_before_it(rt: Runtime, france: list[int]) -> None:
    plain = rt.one(france, max_new_tokens=16)
    assert plain.output_ids[-1] == EOS and len(plain.output_ids) == 8
    out = rt.run(
        [
            make_request(france, rid="min", min_new_tokens=12, max_new_tokens=14),
            make_request(france, rid="stop", min_new_tokens=8, stop=" Paris", max_new_tokens=9),
        ]
    )
    assert len(out["min"].output_ids) >= 12
    assert EOS not in out["min"].output_ids[:12]
    # " Paris" (token 6) cannot stop it before token 8; as in SGLang, it still ends the output
    # then, being among the newest tokens.
    assert len(out["stop"].output_ids) == 8
    assert out["stop"].finish_reason == {"type": "stop", "matched": " Paris"}


def test_stop_strings_end_the_output_and_are_trimmed(rt: Runtime, france: list[int]) -> None:
    requests = [
        make_request(france, rid="word", stop=" Paris"),
        make_request(france, rid="split", stop=["never", "ce is Pa"], stream=True),  # spans 3 tokens
        make_request(france, rid="kept", stop=" Paris", no_stop_trim=True),
    ]
    out = rt.run(requests)
    assert out["word"].text == "The capital of France is"
    assert out["word"].finish_reason == {"type": "stop", "matched": " Paris"}
    assert out["split"].text == "The capital of Fran"
    assert out["split"].finish_reason == {"type": "stop", "matched": "ce is Pa"}
    assert len(out["split"].texts) > 1
    assert all(out["split"].text.startswith(t) for t in out["split"].texts), "streamed text was taken back"
    assert out["kept"].text == "The capital of France is Paris"


def test_stop_token_ids_end_the_output(rt: Runtime, france: list[int]) -> None:
    """As in SGLang, the matched stop token ends `output_ids` but is trimmed from the text
    (unless `no_stop_trim`); so is the end token when special tokens are kept in the text."""
    france_token = token_ids_of(rt.tokenizer, " France")[0]
    stop = {"stop_token_ids": [france_token], "max_new_tokens": 16}
    out = rt.run(
        [
            make_request(france, rid="stop", **stop),
            make_request(france, rid="kept", no_stop_trim=True, **stop),
            make_request(france, rid="eos", skip_special_tokens=False),
        ]
    )
    assert out["stop"].output_ids[-1] == france_token and len(out["stop"].output_ids) == 4
    assert out["stop"].finish_reason == {"type": "stop", "matched": france_token}
    assert out["stop"].text == "The capital of"
    assert out["kept"].text == "The capital of France"
    assert out["eos"].output_ids[-1] == EOS
    assert out["eos"].text == "The capital of France is Paris."


def test_ignore_eos_generates_past_the_end_token(rt: Runtime, france: list[int]) -> None:
    out = rt.one(france, ignore_eos=True, max_new_tokens=11)
    assert len(out.output_ids) == 11
    assert out.output_ids[7] == EOS
    assert out.finish_reason == {"type": "length", "length": 11}


def test_logit_bias_forces_and_forbids_tokens(rt: Runtime, france: list[int]) -> None:
    banana = token_ids_of(rt.tokenizer, " banana")[0]
    out = rt.run(
        [
            make_request(france, rid="force", logit_bias={str(banana): 100.0}, max_new_tokens=4),
            make_request(france, rid="forbid", logit_bias={"504": -100.0}, max_new_tokens=4),
        ]
    )
    assert out["force"].output_ids == [banana] * 4
    assert out["forbid"].output_ids[0] != 504  # "The", the greedy first token


def test_skip_special_tokens(rt: Runtime, france: list[int]) -> None:
    forced = {"logit_bias": {str(IM_START): 100.0}, "max_new_tokens": 3}
    out = rt.run(
        [
            make_request(france, rid="skip", **forced),
            make_request(france, rid="keep", skip_special_tokens=False, **forced),
        ]
    )
    assert out["skip"].output_ids == [IM_START] * 3
    assert "<|im_start|>" not in out["skip"].text
    assert out["keep"].text.count("<|im_start|>") == 3


@pytest.mark.parametrize("stop", ["Ω≈ç", "日本", " Paris"])
def test_stop_string_of_multibyte_characters_split_over_tokens(rt: Runtime, stop: str) -> None:
    """The stop string "Ω≈ç" has 3 characters but 5 byte-level tokens: the check looks far enough back."""
    prefix = token_ids_of(rt.tokenizer, "Hello there,")
    stop_ids = token_ids_of(rt.tokenizer, stop)
    req = Req(make_request([1, 2, 3], stop=stop, max_new_tokens=64), frozenset({EOS}), 49152, 8192)
    for i, token in enumerate(prefix + stop_ids):
        req.output_ids.append(token)
        req.check_finished(rt.tokenizer.decode)
        if i < len(prefix) + len(stop_ids) - 1:
            assert req.finish_reason is None
    assert req.finish_reason.to_json() == {"type": "stop", "matched": stop}
