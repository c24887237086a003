"""Runs the program suite with upstream SGLang's frontend against one of our servers.

Executed as a script by the python of the upstream venv (see venvs.py), never imported by the
test process: there `import sglang` is upstream's package. The suite file is loaded from its
path, so its `import sglang as sgl` binds upstream's frontend and every check runs unchanged on
upstream's `RuntimeEndpoint`.

Each result is appended to `--out` as one JSON line as soon as it is known, so a run that is
killed at its deadline still reports what finished.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

UPSTREAM_EXTRA = "stream_logprobs"
"""A program beyond the suite, which has none that streams with logprobs."""


def load_suite(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("program_suite", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def stream_logprobs() -> None:
    """Streaming with logprobs through upstream's interpreter (`text_async_iter(...,
    return_meta_data=True)`), checked against what upstream's server streams by default:
    cumulative text, and cumulative `output_token_logprobs` whose running length is
    `output_token_logprobs_length`, equal to `completion_tokens` in every event.

    Upstream's own `test_stream_logprobs` is not this: it expects each event to carry only its new
    logprobs, which upstream's server sends only under `--incremental-streaming-output`, and
    there the events' text is incremental too, which upstream's RuntimeEndpoint (slicing what it
    takes for cumulative text) mostly drops."""
    import sglang as sgl

    @sgl.function
    def qa(s, question):
        s += sgl.system("You are a helpful assistant.")
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", return_logprob=True, max_tokens=16))

    state = qa.run(question="Name three colours.", stream=True, temperature=0)

    async def collect() -> list[tuple[str, dict[str, Any]]]:
        return [chunk async for chunk in state.text_async_iter("answer", return_meta_data=True)]

    chunks = asyncio.run(collect())
    assert len(chunks) > 1, chunks  # incremental delivery, not one final piece
    lengths = []
    for text, meta in chunks:
        assert text, chunks
        length = meta["output_token_logprobs_length"]
        assert length == meta["completion_tokens"] == len(meta["output_token_logprobs"]), meta
        for logprob, token_id, *_ in meta["output_token_logprobs"]:
            assert logprob <= 0 and isinstance(token_id, int), meta["output_token_logprobs"]
        lengths.append(length)
    assert lengths == sorted(lengths) and lengths[-1] > lengths[0], lengths
    assert "".join(text for text, _ in chunks) == state["answer"]
    # The last event may add a token without text (the stop token), which no chunk shows.
    final = state.get_meta_info("answer")
    assert final["output_token_logprobs_length"] == final["completion_tokens"] >= lengths[-1], final
    assert len(final["output_token_logprobs"]) == final["completion_tokens"], final


def run_bounded(check: Callable[[], None], timeout: float) -> str | None:
    """Runs `check` in a daemon thread; its traceback, a timeout message, or None if it passed.
    A check that hangs (upstream's interpreter waits forever on a variable whose request failed
    in its executor thread) is left blocked there, and the next program still runs."""
    outcome: list[str | None] = []

    def target() -> None:
        try:
            check()
            outcome.append(None)
        except BaseException as exc:  # every failure is a result to report
            outcome.append("".join(traceback.format_exception(exc))[-4000:])

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome[0] if outcome else f"no result after {timeout:.0f} s (the program hangs)"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", type=Path, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--api-key")
    parser.add_argument("--chat-template", help="upstream's chat template name for RuntimeEndpoint")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--program-timeout", type=float, default=300)
    parser.add_argument("programs", nargs="+")
    args = parser.parse_args()

    import sglang as sgl

    def emit(record: dict[str, Any]) -> None:
        with open(args.out, "a") as out:
            out.write(json.dumps(record) + "\n")

    emit({"kind": "package", "version": sgl.__version__, "file": sgl.__file__})
    suite = load_suite(args.suite)
    checks: dict[str, Callable[[], None]] = {case.name: case.check for case in suite.PROGRAMS}
    checks[UPSTREAM_EXTRA] = stream_logprobs
    sgl.set_default_backend(sgl.RuntimeEndpoint(args.url, api_key=args.api_key, chat_template_name=args.chat_template))
    for name in args.programs:
        started = time.monotonic()
        # The interpreter reports a failed request (the server's error body) as a warning, and
        # the program then fails later on a missing variable: the warnings carry the cause.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            error = run_bounded(checks[name], args.program_timeout)
        emit(
            {
                "kind": "result",
                "program": name,
                "ok": error is None,
                "seconds": time.monotonic() - started,
                "error": error,
                "warnings": [str(w.message)[-2000:] for w in caught][:5],
            }
        )
        # A failed streaming check can leave an event loop set; the next check starts clean.
        asyncio.set_event_loop(None)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # A hung program's threads (upstream's executor threads are not daemons) must not keep the
    # process alive past its results.
    os._exit(code)
