"""The end-to-end suite's fixtures (see `fixtures`) and its `e2e_core` marker.

`e2e_core` marks the subset a platform whose server is slow to warm up (the tpu platform on
XLA:CPU compiles one step per batch shape) runs on every CI run: the native API, the OpenAI API
(chat and completions, streaming, bad input) and a few frontend programs. The marker is
registered here, so a run of the installed suite knows it as well as a checkout's run.
"""

import pytest

from sglang.ci.suites.e2e.fixtures import http, model_info, server, server_factory, tokenizer

__all__ = ["http", "model_info", "server", "server_factory", "tokenizer"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e_core: the e2e subset every CI run runs on slow-to-warm platforms")
