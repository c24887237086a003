"""Our server's Anthropic and Ollama APIs through the official clients, and the frontend's
`sgl.LiteLLM` through LiteLLM, each in a cached venv of its own, against one `sglang serve` on
the embedded model (with an API key, so every client proves it sends it).

- `anthropic` (api_client_checks.py): plain, system prompt, count_tokens, streaming, stop
  sequences, a tool-use round trip (the call forced by `tool_choice`, whose grammar admits only
  a call with an enum argument, so the small model's output always parses), structured output,
  and the error shape of four refusals;
- `ollama` (api_client_checks.py): list, running models, show, chat and generate streamed and not,
  options, and errors (embeddings refused);
- `sgl.LiteLLM` (litellm_programs.py): the program suite's chat programs, through LiteLLM's
  OpenAI provider against our OpenAI routes. (`sgl.Anthropic` runs the same programs in the
  program suite's `anthropic` column, tests/frontend/test_program_suite.py.)
Each client runs the collected checks in one subprocess; each is reported as its own test. The
`SLOW` ones, and every LiteLLM program (its venv takes the longest to build and import; its
request building is tested without a server in tests/frontend/test_lang_chat_apis.py), run
under `-m slow` only.

Cost: one server (loads while the venvs are found), the three subprocesses, about 40 short
greedy generations; the venvs take about two minutes on their first build.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from sglang.ci.servers import RunningServer, ServerGroup

from .api_client_checks import CHECK_NAMES
from .services import start_server
from .venvs import Venv

HERE = Path(__file__).parent
CHECKOUT = HERE.parent.parent
API_KEY = "sk-api-clients"
RUN_TIMEOUT_S = 900
LITELLM_PROGRAMS = ("multi_turn_chat", "stream", "chat_speculative")
"""The suite's programs a chat API runs: no raw-text gen, no select, no min_tokens (see the
features declared in ci/suites/programs.py)."""
SLOW = frozenset({"stop_sequences", "structured_output", "options_limit_tokens", "chat_speculative"})
"""Checks and programs run only under `-m slow`: each repeats a property the default ones cover
on another route (stop strings, grammars, option mapping, the chat turn)."""


def _params(names: tuple[str, ...]) -> list[Any]:
    return [pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else []) for name in names]


def _collected(request: pytest.FixtureRequest, test: str, param: str) -> list[str]:
    """The `param` values of the collected tests of function `test`: what the subprocess runs."""
    items = [item for item in request.session.items if getattr(item, "originalname", None) == test]
    return [item.callspec.params[param] for item in items]


@pytest.fixture(scope="module")
def server(services: ServerGroup) -> RunningServer:
    return start_server(services, api_key=API_KEY)


def _run(venv: Venv, script: str, args: list[str], out: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Runs `script` in `venv`; its JSON lines by name (`check` or `program`)."""
    command = [str(venv.python), str(HERE / script), *args, "--out", str(out)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, **(env or {})},
        cwd=out.parent,
    )
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    if done.returncode != 0:
        pytest.fail(f"{script} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return {r.get("check") or r.get("program"): r for r in records}


def _client_results(name: str, venv: Venv, server: RunningServer, tmp: Path, checks: list[str]) -> dict[str, Any]:
    server.wait_ready()
    args = ["--client", name, "--url", server.url, "--api-key", API_KEY, *checks]
    return _run(venv, "api_client_checks.py", args, tmp / f"{name}.jsonl")


@pytest.fixture(scope="module")
def anthropic_results(
    request: pytest.FixtureRequest,
    server: RunningServer,
    anthropic_client_venv: Venv,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    checks = _collected(request, "test_anthropic_client", "check")
    return _client_results("anthropic", anthropic_client_venv, server, tmp_path_factory.mktemp("anthropic"), checks)


@pytest.fixture(scope="module")
def ollama_results(
    request: pytest.FixtureRequest,
    server: RunningServer,
    ollama_client_venv: Venv,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    checks = _collected(request, "test_ollama_client", "check")
    return _client_results("ollama", ollama_client_venv, server, tmp_path_factory.mktemp("ollama"), checks)


@pytest.fixture(scope="module")
def litellm_results(
    request: pytest.FixtureRequest,
    server: RunningServer,
    litellm_venv: Venv,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    server.wait_ready()
    programs = _collected(request, "test_litellm_backend_runs_chat_programs", "program")
    args = ["--url", server.url, "--api-key", API_KEY, *programs]
    # Our checkout's `sglang`; LiteLLM's bundled model cost map, not the one it would download.
    env = {"PYTHONPATH": str(CHECKOUT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return _run(litellm_venv, "litellm_programs.py", args, tmp_path_factory.mktemp("litellm") / "programs.jsonl", env)


def _assert_passed(results: dict[str, Any], name: str) -> None:
    assert name in results, f"{name} did not run: {sorted(results)}"
    assert results[name]["ok"], results[name]["error"]


@pytest.mark.parametrize("check", _params(CHECK_NAMES["anthropic"]))
def test_anthropic_client(check: str, anthropic_results: dict[str, Any]) -> None:
    _assert_passed(anthropic_results, check)


@pytest.mark.parametrize("check", _params(CHECK_NAMES["ollama"]))
def test_ollama_client(check: str, ollama_results: dict[str, Any]) -> None:
    _assert_passed(ollama_results, check)


@pytest.mark.slow  # LiteLLM's venv build and import cost about two minutes of the CI budget
@pytest.mark.parametrize("program", LITELLM_PROGRAMS)
def test_litellm_backend_runs_chat_programs(program: str, litellm_results: dict[str, Any]) -> None:
    _assert_passed(litellm_results, program)


def test_ollama_probes_and_anthropic_key_header(server: RunningServer) -> None:
    """What the clients do not call: Ollama's root probe and version; the key as `x-api-key`,
    accepted on Anthropic's routes only; the routes' schemas in the OpenAPI document."""
    server.wait_ready()
    bearer = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.Client(base_url=server.url, timeout=60) as http:
        assert http.head("/", headers=bearer).status_code == 200
        assert http.get("/", headers=bearer).text == "Ollama is running"
        assert http.get("/api/version", headers=bearer).json()["version"]
        body = {"model": "default", "messages": [{"role": "user", "content": "Hi"}]}
        assert http.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": API_KEY}).status_code == 200
        wrong = http.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": "wrong"})
        assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
        assert http.get("/v1/models", headers={"x-api-key": API_KEY}).status_code == 401
        unauthorized = http.get("/api/tags")
        assert unauthorized.status_code == 401 and set(unauthorized.json()) == {"error"}
        # The new routes' bodies are in the OpenAPI document, self-contained (no dangling $ref).
        paths = http.get("/openapi.json", headers=bearer).json()["paths"]
        chat_body = paths["/api/chat"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert "messages" in chat_body["properties"] and "$ref" not in json.dumps(chat_body)
        assert "/v1/messages" in paths and "/v1/messages/count_tokens" in paths
