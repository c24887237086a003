"""Upstream import paths resolve to our modules (the same objects, not copies)."""

from __future__ import annotations

import sglang as sgl


def test_upstream_module_paths_are_our_modules():
    from sglang.global_config import global_config
    from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint
    from sglang.lang.chat_template import get_chat_template
    from sglang.lang.choices import greedy_token_selection
    from sglang.lang.interpreter import ProgramState
    from sglang.lang.ir import REGEX_FLOAT, REGEX_INT, REGEX_STR

    assert RuntimeEndpoint is sgl.RuntimeEndpoint and ProgramState is sgl.ProgramState
    assert get_chat_template is sgl.get_chat_template and greedy_token_selection is sgl.greedy_token_selection
    assert global_config is sgl.global_config  # the attribute stays the config object
    assert all(isinstance(r, str) for r in (REGEX_FLOAT, REGEX_INT, REGEX_STR))
    assert sgl.lang.ir.SglGen is sgl.frontend.ir.SglGen


def test_the_upstream_public_names_exist():
    names = [
        *("function", "gen", "gen_int", "gen_string", "select", "image", "video", "separate_reasoning"),
        *("system", "user", "assistant", "system_begin", "system_end", "user_begin", "user_end"),
        *("assistant_begin", "assistant_end", "set_default_backend", "flush_cache", "get_server_info"),
        *("Runtime", "RuntimeEndpoint", "OpenAI", "global_config", "token_length_normalized"),
        *("greedy_token_selection", "unconditional_likelihood_normalized"),
    ]
    assert [n for n in names if not hasattr(sgl, n)] == []
