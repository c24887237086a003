"""The backends of the program suite, their declared limits, and the session runtimes behind them.

Five backends, all on our runtime with the embedded model:

- `endpoint`: `sgl.RuntimeEndpoint` on a live `sglang serve` subprocess (native /generate);
- `engine`: `sgl.EngineBackend` on an in-process `sglang.Engine`;
- `openai`: `sgl.OpenAI(model, is_chat_model=False, ...)` on the same server's /v1 (completions);
- `openai-chat`: `sgl.OpenAI(model, ...)` on the same server's /v1, a chat model (the default
  for a model name OpenAI does not list as a completion model);
- `anthropic`: `sgl.Anthropic(model, ...)` on the same server's /v1/messages (Anthropic's
  Messages API: chat only, no log-probabilities, no parameters beyond its own).

The server and the engine are started once per session, only if a collected test needs them, and
at the same time (the server subprocess loads while the engine loads in-process). The server
runs with an API key, so every backend that talks HTTP also proves it sends the key.

A test module uses the fixtures by making them its own attributes (`backend =
conftest_backends.backend`): this is a helper module, not a conftest, so the other frontend
tests never start a runtime. The server's log is in pytest's temporary folder
(`program-suite*/program-suite-server-PORT.log`); a server that fails to start fails every test
that needs it, with the log's tail.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import sglang as sgl
from sglang.ci.servers import CPU_THREADS, DEVICE, RunningServer, launch, serve_spec
from sglang.ci.suites.programs import Feature

MAX_TOTAL_TOKENS = 16384
FINISHED_REQUESTS_METRIC = "sglang_requests_total"
"""The server's finished-request counter (all finish reasons)."""
API_KEY = "sk-program-suite"


@dataclass(frozen=True)
class BackendSpec:
    """A backend column: what it cannot do (feature -> declared reason), what `select` costs."""

    name: str
    unsupported: dict[Feature, str] = field(default_factory=dict)
    select_requests: int = 2
    """Requests (HTTP, or engine calls) one `select` makes."""


NATIVE_NO_API_SPEC = (
    "num_api_spec_tokens is API speculative execution, measured by an API backend's token_usage; "
    "the native protocol has no such counter (upstream runs it on OpenAI backends only)"
)

BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec("endpoint", {Feature.API_SPEC: NATIVE_NO_API_SPEC}),
        BackendSpec("engine", {Feature.API_SPEC: NATIVE_NO_API_SPEC}),
        BackendSpec("openai", select_requests=1),
        BackendSpec(
            "openai-chat",
            {
                Feature.TEXT_GEN: (
                    "chat API: gen continues only an assistant turn, so a gen in raw text is a "
                    "BackendCapabilityError (proved by test_declared_limit); the openai column runs it"
                )
            },
            select_requests=1,
        ),
        BackendSpec(
            "anthropic",
            {
                Feature.TEXT_GEN: (
                    "Messages API: gen continues only an assistant turn, so a gen in raw text is a "
                    "BackendCapabilityError (proved by test_declared_limit)"
                ),
                Feature.SCORING: "the Messages API returns no log-probabilities to score choices with",
                Feature.SGLANG_PARAMS: "the Messages API has no min_tokens (sgl.Anthropic refuses it by name)",
            },
            select_requests=0,
        ),
    )
}
REFERENCE_BACKEND = "endpoint"
"""Heavy programs run by default on this backend only, elsewhere under `-m slow`."""


@dataclass
class SuiteRuntimes:
    """The session's server and engine (each None when no collected test needs it)."""

    server: RunningServer | None = None
    engine: Any = None  # sglang.Engine
    backends: dict[str, Any] = field(default_factory=dict)

    def backend(self, name: str) -> Any:
        """The session's backend object for column `name`, made on first use."""
        if name not in self.backends:
            self.backends[name] = self._make(name)
        return self.backends[name]

    def _make(self, name: str) -> Any:
        if name == "engine":
            assert self.engine is not None, "the engine was not started for this session"
            return sgl.EngineBackend(self.engine)
        assert self.server is not None, "the server was not started for this session"
        if name == "endpoint":
            return sgl.RuntimeEndpoint(self.server.url, api_key=API_KEY)
        model = self.server.model_name()
        if name == "anthropic":
            return sgl.Anthropic(model, base_url=self.server.url, api_key=API_KEY)
        chat = {"openai": False, "openai-chat": True}[name]
        return sgl.OpenAI(model, is_chat_model=chat, base_url=self.server.url + "/v1", api_key=API_KEY)

    def close(self) -> None:
        for backend in self.backends.values():
            if not isinstance(backend, sgl.EngineBackend):
                backend.shutdown()
        if self.engine is not None:
            self.engine.shutdown()
        if self.server is not None:
            self.server.stop()


def _needed_backends(session: pytest.Session) -> set[str]:
    needed = set()
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("backend_name") if callspec is not None else None
        if name in BACKENDS and not any(m.name == "skip" for m in item.iter_markers()):
            needed.add(name)
    return needed


@pytest.fixture(scope="session")
def suite_runtimes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SuiteRuntimes]:
    needed = _needed_backends(request.session)
    runtimes = SuiteRuntimes()
    log_dir = tmp_path_factory.mktemp("program-suite")
    try:
        if needed - {"engine"}:
            flags = ("--max-total-tokens", str(MAX_TOTAL_TOKENS))
            spec = serve_spec(*flags, api_key=API_KEY, log_level="warning", name="program-suite-server")
            runtimes.server = launch(spec, log_dir, wait=False)  # loads while the engine below loads
        if "engine" in needed:
            runtimes.engine = sgl.Engine(
                device=DEVICE,
                max_total_tokens=MAX_TOTAL_TOKENS,
                log_level="warning",
                **({"cpu_threads": CPU_THREADS} if DEVICE == "cpu" else {}),
            )
        if runtimes.server is not None:
            runtimes.server.wait_ready()
        yield runtimes
    finally:
        runtimes.close()


@pytest.fixture
def backend(suite_runtimes: SuiteRuntimes, backend_name: str) -> Any:
    """The backend of column `backend_name` (which tests parametrize directly)."""
    return suite_runtimes.backend(backend_name)
