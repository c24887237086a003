"""The end-to-end suite's fixtures (see `fixtures`)."""

from sglang.ci.suites.e2e.fixtures import http, model_info, server, server_factory, tokenizer

__all__ = ["http", "model_info", "server", "server_factory", "tokenizer"]
