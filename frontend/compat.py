"""Upstream module paths (`sglang.lang.*`, `sglang.global_config`) as aliases of ours.

Programs written for upstream SGLang import from those paths (`from sglang.lang.ir import
REGEX_INT`, `from sglang.lang.interpreter import ProgramState`). Each alias is registered in
`sys.modules` as the *same* module object as ours, never a second copy, so classes and
`isinstance` checks agree.
"""

from __future__ import annotations

import importlib
import sys

ALIASES: dict[str, str] = {
    "sglang.lang": "sglang.frontend",
    "sglang.lang.api": "sglang.frontend.api",
    "sglang.lang.ir": "sglang.frontend.ir",
    "sglang.lang.interpreter": "sglang.frontend.state",
    "sglang.lang.tracer": "sglang.frontend.tracer",
    "sglang.lang.compiler": "sglang.frontend.compiler",
    "sglang.lang.chat_template": "sglang.frontend.chat_template",
    "sglang.lang.choices": "sglang.frontend.choices",
    "sglang.lang.backend": "sglang.frontend.backend",
    "sglang.lang.backend.base_backend": "sglang.frontend.backend.base",
    "sglang.lang.backend.runtime_endpoint": "sglang.frontend.backend.runtime_endpoint",
    "sglang.lang.backend.openai": "sglang.frontend.backend.openai",
    "sglang.lang.backend.anthropic": "sglang.frontend.backend.anthropic",
    "sglang.lang.backend.litellm": "sglang.frontend.backend.litellm",
    # Only the module: `sglang.global_config` the attribute stays the config object, as upstream.
    "sglang.global_config": "sglang.frontend.config",
}


def install_lang_aliases() -> None:
    for alias, target in ALIASES.items():
        sys.modules.setdefault(alias, importlib.import_module(target))
    sglang = sys.modules["sglang"]
    if not hasattr(sglang, "lang"):
        sglang.lang = sys.modules["sglang.lang"]
