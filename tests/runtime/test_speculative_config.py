"""Speculative decoding's flags: upstream's names and defaults, refusals with their reason, and
the reporting (`meta_info` fields, `/metrics` names)."""

from __future__ import annotations

import argparse

import pytest

from sglang.runtime.observability.metrics import ServerMetrics
from sglang.runtime.processes.control import SchedulerStatus
from sglang.runtime.server_args import ServerArgs
from sglang.runtime.speculative.config import speculative_config


def test_flags_have_upstreams_names_and_defaults() -> None:
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = ServerArgs.from_cli_args(parser.parse_args(["--speculative-algorithm", "NGRAM"]))
    config = speculative_config(args)
    assert config is not None
    assert (config.num_draft_tokens, config.max_drafts, config.num_steps) == (12, 11, 12)
    assert (config.min_match_window, config.max_match_window) == (1, 12)
    assert (config.max_trie_depth, config.capacity) == (18, 10_000_000)
    parsed = parser.parse_args(
        ["--speculative-algorithm", "ngram", "--speculative-num-draft-tokens", "5", "--speculative-eagle-topk", "1"]
    )
    assert speculative_config(ServerArgs.from_cli_args(parsed)).max_drafts == 4
    assert speculative_config(ServerArgs()) is None


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"speculative_algorithm": "EAGLE"}, "draft head trained"),
        ({"speculative_algorithm": "EAGLE3"}, "draft head trained"),
        ({"speculative_algorithm": "MTP"}, "draft head trained"),
        ({"speculative_algorithm": "MEDUSA"}, "must be NGRAM or STANDALONE"),
        ({"speculative_algorithm": "NGRAM", "speculative_eagle_topk": 4}, "tree attention masks"),
        ({"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 1}, "at least 2"),
        ({"speculative_algorithm": "STANDALONE"}, "--speculative-draft-model-path"),
        (
            {
                "speculative_algorithm": "STANDALONE",
                "speculative_draft_model_path": "d",
                "speculative_num_steps": 2,
                "speculative_num_draft_tokens": 5,
            },
            "must be --speculative-num-steps + 1",
        ),
        (
            {
                "speculative_algorithm": "NGRAM",
                "speculative_ngram_min_match_window_size": 4,
                "speculative_ngram_max_match_window_size": 2,
            },
            "1 <= min <= max",
        ),
    ],
)
def test_refused_at_startup_with_the_reason(changes: dict, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("+", r"\+")):
        ServerArgs(**changes)


def test_metrics_carry_upstreams_speculative_names() -> None:
    metrics = ServerMetrics("m")
    counts = dict.fromkeys(
        (
            "num_running_requests",
            "num_waiting_requests",
            "num_request_tokens",
            "kv_tokens_free",
            "kv_tokens_cached",
            "kv_tokens_evictable",
            "kv_tokens_in_use",
            "prompt_tokens",
            "generation_tokens",
            "cached_tokens",
            "retractions",
            "static_steps",
            "eager_steps",
            "static_step_fallbacks",
        ),
        0,
    )
    status = SchedulerStatus(
        **counts, kv_tokens_total=100, spec_verify_ct=10, spec_draft_tokens=40, spec_accepted_tokens=20, verify_steps=8
    )
    text = metrics.render(status).decode()
    assert 'sglang:spec_verify_calls_total{model_name="m"} 10.0' in text
    labels = 'engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"'
    assert f"sglang:spec_accept_length{{{labels}}} 3.0" in text
    assert f"sglang:spec_accept_rate{{{labels}}} 0.5" in text
    assert "sglang_verify_steps_total 8.0" in text
