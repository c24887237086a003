"""Fixtures for runtime tests on the embedded model (SmolLM2-135M-Instruct).

One model is loaded per session, in-process, behind a `Scheduler` driven step by step (fast and
deterministic); `Runtime.make_scheduler` builds more schedulers around that same model with their
own KV pool and settings (a tiny pool to force retraction, the prefix cache off, ...). One
`Engine` (the full multi-process path) is started per session on first use. Helpers live in
runtime_harness.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sglang.ci.servers import CPU_THREADS, DEVICE
from sglang.runtime.loader import EmbeddedModelMissingError, embedded_model_path
from sglang.runtime.loader.tokenizer import load_tokenizer
from sglang.runtime.processes.detokenizer import Detokenizer
from sglang.runtime.scheduler.process import build_scheduler
from sglang.runtime.server_args import ServerArgs

from .runtime_harness import (  # noqa: F401  (re-exported for modules that import them from conftest)
    SHARED_KV_TOKENS,
    Runtime,
    chat_prompt,
    corpus_ids,
    make_request,
    model_threads,
    token_ids_of,
)


@pytest.fixture(scope="session")
def embedded_model() -> Path:
    try:
        return embedded_model_path()
    except EmbeddedModelMissingError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def runtime(embedded_model: Path) -> Runtime:
    args = ServerArgs(
        device=DEVICE, max_total_tokens=SHARED_KV_TOKENS, chunked_prefill_size=512, cpu_threads=CPU_THREADS
    )
    with model_threads():
        scheduler, info = build_scheduler(args)
    tokenizer = load_tokenizer(Path(info.tokenizer_path))
    return Runtime(scheduler, info, tokenizer, Detokenizer(tokenizer))


@pytest.fixture
def rt(runtime: Runtime) -> Iterator[Runtime]:
    """The session runtime (on `CPU_THREADS` torch threads while the test runs), checked to be
    idle and leak-free after each test."""
    with model_threads():
        yield runtime
    scheduler = runtime.scheduler
    assert not scheduler.has_work
    assert scheduler.cache.protected_size() == 0, "a finished request left its prefix locked"
    assert scheduler.allocator.available_tokens() + scheduler.cache.evictable_size() == scheduler.capacity


@pytest.fixture(scope="session")
def tokenizer(runtime: Runtime) -> Any:
    return runtime.tokenizer


@pytest.fixture(scope="session")
def engine(embedded_model: Path) -> Iterator[Any]:
    from sglang.runtime.engine import Engine

    engine = Engine(device=DEVICE, max_total_tokens=SHARED_KV_TOKENS, cpu_threads=CPU_THREADS, log_level="warning")
    yield engine
    engine.shutdown()
