"""The program suite (programs.py) through every backend (conftest_backends.py), on our runtime.

Every program x backend pair is one test. A pair whose program needs a feature the backend
declares unsupported is skipped at collection with the declared reason, and the declaration itself
is tested (`test_declared_limit`), so a skip never hides a program that would have run. Heavy
programs run by default on the reference backend only, on the others under `-m slow`; light ones
on the reference backend run by default in the conformance suite's cpu run, here under `-m slow`
(`-m "slow or not slow"` runs everything).

At the end of the session the terminal summary prints the program x backend table.

`select` on `openai-chat` is scored the way the frontend's OpenAI backend scores it for any model:
one /v1/completions request with `echo` and `logprobs`. Our server serves the chat model there
too, so it runs; an endpoint without prompt logprobs answers BackendCapabilityError instead.

Cost: one server and one engine for the whole session (loaded side by side, about 20 s),
temperature 0, at most 16 new tokens per gen: about 2.5 minutes by default on a shared 2-core
machine, 3 with `-m "slow or not slow"`, most of it decoding.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest

import sglang as sgl
from sglang.ci.suites.programs import PROGRAMS, Feature, ProgramCase, few_shot_qa, true_or_false

from . import conftest_backends
from .conftest_backends import BACKENDS, FINISHED_REQUESTS_METRIC, REFERENCE_BACKEND, SuiteRuntimes

# The session fixtures (a helper module's fixtures are visible where they are module attributes).
suite_runtimes = conftest_backends.suite_runtimes
backend = conftest_backends.backend

THIS_FILE = "test_program_suite.py"
TABLE_PLUGIN = "sglang-program-suite-table"


def _program_params() -> list[Any]:
    params = []
    for case in PROGRAMS:
        for name, spec in BACKENDS.items():
            marks: list[Any] = []
            missing = sorted(f.value for f in case.needs if f in spec.unsupported)
            if missing:
                marks.append(pytest.mark.skip(reason=spec.unsupported[Feature(missing[0])]))
            elif case.heavy != (name == REFERENCE_BACKEND):
                # Light programs on the reference backend are the conformance suite's cpu run
                # (ci/suites/e2e/test_frontend_programs.py): by default they run there.
                marks.append(pytest.mark.slow)
            params.append(pytest.param(case, name, id=f"{case.name}-{name}", marks=marks))
    return params


@pytest.mark.parametrize(("case", "backend_name"), _program_params())
def test_program(case: ProgramCase, backend_name: str, backend: Any) -> None:
    sgl.set_default_backend(backend)
    case.check()


# ---- select's request count -------------------------------------------------------------------


class RequestLog:
    """Every request a backend sends: HTTP requests (path, JSON body), or `Engine.generate` calls."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []

    def on_http(self, request: Any) -> None:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.url.path, body))

    def wrap_engine_generate(self, generate: Any) -> Any:
        def counted(**kwargs: Any) -> Any:
            body = {("text" if k == "prompt" else k): v for k, v in kwargs.items() if v is not None}
            self.requests.append(("Engine.generate", body))
            return generate(**kwargs)

        return counted


@pytest.mark.parametrize(
    "backend_name", [name for name, spec in BACKENDS.items() if Feature.SCORING not in spec.unsupported]
)
def test_select_request_count(
    backend_name: str, backend: Any, suite_runtimes: SuiteRuntimes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A select over 3 choices: exactly 2 requests on the native protocol (a prefill-only request,
    then one batched scoring request), 1 on OpenAI (one /completions request with echo)."""
    log = RequestLog()
    if backend_name == "engine":
        monkeypatch.setattr(backend.engine, "generate", log.wrap_engine_generate(backend.engine.generate))
    else:
        hooks = backend.http._client.event_hooks
        monkeypatch.setitem(hooks, "request", [*hooks["request"], log.on_http])
    server = suite_runtimes.server if backend_name != "engine" else None
    finished_before = server.metric_total(FINISHED_REQUESTS_METRIC) if server is not None else 0.0

    state = true_or_false.run(statement="The capital of Germany is Berlin.", backend=backend)
    assert state["answer"] in ("True", "False", "Unknown")

    assert len(log.requests) == BACKENDS[backend_name].select_requests, log.requests
    prefix = state.text()[: -len(state["answer"])]
    texts = [prefix + choice for choice in ("True", "False", "Unknown")]
    if backend_name in ("endpoint", "engine"):
        (path_1, prefill), (path_2, scoring) = log.requests
        assert path_1 == path_2 == ("/generate" if backend_name == "endpoint" else "Engine.generate")
        assert prefill["text"] == prefix and prefill["sampling_params"]["max_new_tokens"] == 0
        assert scoring["text"] == texts and scoring["return_logprob"] is True
        assert scoring["sampling_params"]["max_new_tokens"] == 0
        assert 0 <= scoring["logprob_start_len"] < len(prefix)
    else:
        ((path, scoring),) = log.requests
        assert path == "/v1/completions"
        assert scoring["prompt"] == texts and scoring["echo"] is True and scoring["logprobs"] is not None
    if server is not None:
        # The server agrees: one finished request per text (the prefill's, and one per choice).
        expected = len(texts) + (1 if backend_name == "endpoint" else 0)
        assert server.metric_total(FINISHED_REQUESTS_METRIC) - finished_before == expected


# ---- the declared limits are real ---------------------------------------------------------------


@pytest.mark.parametrize(
    "backend_name",
    [name for name, spec in BACKENDS.items() if Feature.TEXT_GEN in spec.unsupported],
)
def test_declared_limit(backend_name: str, backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The programs skipped for TEXT_GEN fail on this backend with a clear error, before any request."""
    log = RequestLog()
    hooks = backend.http._client.event_hooks
    monkeypatch.setitem(hooks, "request", [*hooks["request"], log.on_http])
    state = few_shot_qa.run(question="What is the capital of Japan?", backend=backend)
    with pytest.raises(sgl.ProgramError, match="chat") as failure:
        state["answer"]
    assert isinstance(failure.value.cause, sgl.BackendCapabilityError)
    assert log.requests == []


# ---- the program x backend table ------------------------------------------------------------------


class SuiteTable:
    """Prints program x backend -> pass / skip (reason) / fail in the terminal summary."""

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        cells: dict[str, dict[str, str]] = defaultdict(dict)
        reasons: list[str] = []
        for outcome in ("passed", "failed", "skipped", "error"):
            for report in terminalreporter.stats.get(outcome, []):
                row_backend = _row_and_backend(getattr(report, "nodeid", ""))
                if row_backend is None:
                    continue
                row, name = row_backend
                if outcome == "skipped":
                    reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
                    reason = reason.removeprefix("Skipped: ")
                    if reason not in reasons:
                        reasons.append(reason)
                    cells[row][name] = f"skip[{reasons.index(reason) + 1}]"
                elif outcome == "passed" and report.when == "call":
                    cells[row].setdefault(name, "pass")
                elif outcome in ("failed", "error"):
                    cells[row][name] = "FAIL"
        if not cells:
            return
        names = list(BACKENDS)
        order = [case.name for case in PROGRAMS] + ["select_request_count", "declared_limit"]
        rows = [r for r in order if r in cells]
        width = max(len(r) for r in rows)
        tr = terminalreporter
        tr.write_sep("=", "program suite: program x backend")
        tr.write_line(" | ".join([" " * width, *(n.ljust(11) for n in names)]))
        for row in rows:
            tr.write_line(" | ".join([row.ljust(width), *(cells[row].get(n, "-").ljust(11) for n in names)]))
        for i, reason in enumerate(reasons, start=1):
            tr.write_line(f"[{i}] {reason}")


def _row_and_backend(nodeid: str) -> tuple[str, str] | None:
    if THIS_FILE not in nodeid or "[" not in nodeid:
        return None
    function, _, param = nodeid.split("::")[-1].partition("[")
    param = param.rstrip("]")
    for name in sorted(BACKENDS, key=len, reverse=True):
        if param == name:
            return function.removeprefix("test_"), name
        if param.endswith("-" + name):
            return param[: -len(name) - 1], name
    return None


@pytest.fixture(scope="session", autouse=True)
def _print_table(request: pytest.FixtureRequest) -> None:
    manager = request.config.pluginmanager
    if not manager.has_plugin(TABLE_PLUGIN):
        manager.register(SuiteTable(), TABLE_PLUGIN)
