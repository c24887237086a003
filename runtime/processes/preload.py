"""Importing, on a thread, what the engine's parent process needs once its children are up.

The parent of `launch_children` waits while the children import and load the model, with a core
to spare; the modules it needs afterwards (the tokenizer's code, the tokenizer manager with
xgrammar, the HTTP app) import in that time instead of after it, or before the children start.

Invariant: the caller joins the thread before it imports any of those modules itself, so two
threads never import the same modules at once (a circular import between them could hand one of
them a module that is not yet initialised).
"""

from __future__ import annotations

import contextlib
import importlib
import threading

TOKENIZER_CODE = ("transformers.models.auto.tokenization_auto", "transformers.utils.type_validators")
"""What `load_tokenizer` imports: `transformers.AutoTokenizer` (torch under it), and what reading
a model's config imports on first use (torch.distributed.tensor and sympy, under transformers'
config validators). A name a later transformers moves is skipped: it then imports on first use."""


def preload(*modules: str) -> threading.Thread:
    """Starts importing `modules` in order on a daemon thread; join it before using them."""
    thread = threading.Thread(target=import_modules, args=modules, name="sglang-preload", daemon=True)
    thread.start()
    return thread


def import_modules(*modules: str) -> None:
    """Imports `modules` in order, skipping any that fails."""
    for module in modules:
        # A module that fails to import fails again, with its traceback, where the caller imports it.
        with contextlib.suppress(Exception):
            importlib.import_module(module)
