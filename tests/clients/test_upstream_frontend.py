"""Upstream SGLang's frontend (PyPI `sglang`, in its own venv) runs our program suite against our
server, unchanged.

The suite (tests/frontend/programs.py) is written as upstream users write programs; here it runs
in a subprocess whose `import sglang` is upstream's package, on upstream's `RuntimeEndpoint`
(the native /generate protocol, with the server's API key), against `sglang serve` on the
embedded model. Every program our own frontend runs on the native protocol must pass, streaming
and logprobs included, and so must a streaming-with-logprobs program (upstream_programs.py),
which the suite lacks.

Upstream's OpenAI backend is not run: it builds a tiktoken encoder when it is constructed, and
tiktoken downloads its encoding files, which these machines cannot reach.

Cost: one server, one subprocess for the whole suite: about a minute and a half on a shared
2-core machine, plus about a minute and a half for the venv on its first build.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from sglang.ci.servers import RunningServer, ServerGroup
from sglang.ci.suites import programs as programs_module

from .services import start_server
from .upstream_programs import UPSTREAM_EXTRA
from .venvs import UPSTREAM_SGLANG_VERSION, Venv

HERE = Path(__file__).parent
SUITE = Path(programs_module.__file__)
RUNNER = HERE / "upstream_programs.py"
API_KEY = "sk-upstream-frontend"
CHAT_TEMPLATE = "chatml"
"""Upstream's RuntimeEndpoint picks its chat template by matching the server's model path
against the model families it knows; SmolLM2 is not one of them, so without a name it would
use its generic `SYSTEM:`/`USER:` template instead of the model's own, ChatML. A user of
upstream's client names it, and so does this test."""
RUN_TIMEOUT_S = 900

NATIVE_UNSUPPORTED = {
    "api_spec": (
        "num_api_spec_tokens is measured by an API backend's token_usage, which the native "
        "protocol has not (upstream runs it on OpenAI backends only; so does the suite's endpoint column)"
    )
}


def _load_suite() -> ModuleType:
    """The suite file as a module of this process (only its list of cases is read here)."""
    spec = importlib.util.spec_from_file_location("clients_program_suite", SUITE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _cases() -> list[Any]:
    params = []
    for case in _load_suite().PROGRAMS:
        missing = sorted(f.value for f in case.needs if f.value in NATIVE_UNSUPPORTED)
        marks = [pytest.mark.skip(reason=NATIVE_UNSUPPORTED[missing[0]])] if missing else []
        params.append(pytest.param(case.name, id=case.name, marks=marks))
    params.append(pytest.param(UPSTREAM_EXTRA, id=UPSTREAM_EXTRA))
    return params


CASES = _cases()
RUNNABLE = [p.values[0] for p in CASES if not p.marks]


class UpstreamRun:
    """What the upstream subprocess reported: its package, and one result per program."""

    def __init__(self, records: list[dict[str, Any]], returncode: int | None, output: str, seconds: float) -> None:
        self.package = next((r for r in records if r["kind"] == "package"), None)
        self.results = {r["program"]: r for r in records if r["kind"] == "result"}
        self.returncode = returncode
        self.output = output
        self.seconds = seconds


@pytest.fixture(scope="module")
def server(services: ServerGroup) -> RunningServer:
    return start_server(services, api_key=API_KEY)


@pytest.fixture(scope="module")
def upstream_run(
    server: RunningServer, upstream_venv: Venv, tmp_path_factory: pytest.TempPathFactory, figures: dict[str, str]
) -> UpstreamRun:
    """Runs every runnable program in one upstream subprocess (the server loaded while the venv
    was being found or built); the server is stopped as soon as the run ends."""
    server.wait_ready()
    work = tmp_path_factory.mktemp("upstream-frontend")
    out = work / "results.jsonl"
    command = [
        str(upstream_venv.python),
        str(RUNNER),
        "--suite",
        str(SUITE),
        "--url",
        server.url,
        "--api-key",
        API_KEY,
        "--chat-template",
        CHAT_TEMPLATE,
        "--out",
        str(out),
        *RUNNABLE,
    ]
    started = time.monotonic()
    try:
        # cwd outside the checkout: the checkout's own `sglang` folder must not shadow upstream's.
        done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        returncode, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        returncode, output = None, f"killed after {RUN_TIMEOUT_S} s\n{expired.stdout or ''}{expired.stderr or ''}"
    seconds = time.monotonic() - started
    server.stop()
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    run = UpstreamRun(records, returncode, output, seconds)
    passed = sum(1 for r in run.results.values() if r["ok"])
    figures["upstream frontend programs"] = (
        f"{passed}/{len(RUNNABLE)} passed in {seconds:.0f} s (sglang {run.package and run.package['version']})"
    )
    return run


def test_concate_and_append_request(server: RunningServer) -> None:
    """The call upstream's client makes at `join("concate_and_append")`: answered 200 (a refusal
    would stop its program), and a malformed body still gets a 400 naming the field."""
    server.wait_ready()
    url = server.url + "/concate_and_append_request"
    ok = httpx.post(url, json={"src_rids": ["a", "b"], "dst_rid": "c"}, headers=server.headers, timeout=30)
    assert ok.status_code == 200, ok.text
    assert ok.json()["concatenated"] is False
    bad = httpx.post(url, json={"src_rids": "a", "dst_rid": "c"}, headers=server.headers, timeout=30)
    assert bad.status_code == 400 and "src_rids" in bad.text, bad.text
    assert httpx.post(url, json={"src_rids": [], "dst_rid": "c"}, timeout=30).status_code == 401  # the key


def test_runs_upstream_package(upstream_run: UpstreamRun, upstream_venv: Venv) -> None:
    """The subprocess imported upstream's package from its venv, not ours from the checkout."""
    assert upstream_run.package is not None, upstream_run.output[-4000:]
    assert upstream_run.package["version"] == UPSTREAM_SGLANG_VERSION
    assert Path(upstream_run.package["file"]).is_relative_to(upstream_venv.path), upstream_run.package
    assert upstream_run.returncode == 0, upstream_run.output[-4000:]


@pytest.mark.parametrize("program", CASES)
def test_upstream_program(program: str, upstream_run: UpstreamRun) -> None:
    result = upstream_run.results.get(program)
    assert result is not None, f"{program} did not run:\n{upstream_run.output[-4000:]}"
    causes = "\n".join(result["warnings"])
    assert result["ok"], f"{result['error']}\nwarnings (the server's error bodies):\n{causes}"
