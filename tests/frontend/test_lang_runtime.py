"""sgl.Runtime: server flags, subprocess start-up until /health, delegation, failure reporting."""

from __future__ import annotations

from pathlib import Path

import pytest

import sglang as sgl
from sglang.frontend.backend.runtime import server_flags
from sglang.frontend.config import resolve_backend

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_server_flags():
    flags = server_flags({"model_path": "m", "tp_size": 2, "trust_remote_code": True, "x": False, "y": None})
    assert flags == ["--model-path", "m", "--tp-size", "2", "--trust-remote-code"]
    assert server_flags({"stop": ["a", "b"]}) == ["--stop", "a", "b"]


@pytest.fixture
def fake_server_module(monkeypatch):
    # `python -m tests.frontend.fake_launch_server` finds the tests package from its working folder.
    monkeypatch.setattr(sgl.Runtime, "server_module", "tests.frontend.fake_launch_server")
    monkeypatch.chdir(REPO_ROOT)


def test_runtime_starts_the_server_and_programs_run_on_it(fake_server_module):
    with sgl.Runtime(model_path="fake/Model-Instruct", launch_timeout=30) as runtime:
        assert resolve_backend(runtime) is runtime.endpoint  # a Runtime is usable as a backend
        assert runtime.endpoint.get_model_name() == "fake/Model-Instruct"

        @sgl.function
        def prog(s):
            s += "Hi" + sgl.gen("x", max_tokens=5)

        assert prog.run(backend=runtime)["x"] == "Hello"
        process = runtime.process
    assert process.poll() is not None  # shut down on exit


def test_runtime_reports_a_server_that_dies(fake_server_module):
    with pytest.raises(RuntimeError, match="cannot load the model"):
        sgl.Runtime(model_path="m", fail=True, launch_timeout=30)


def test_engine_backend_adapts_the_native_protocol():
    class FakeEngine:
        def __init__(self):
            self.calls = []

        def get_model_info(self):
            return {"model_path": "Qwen/Qwen2-0.5B-Instruct"}

        def generate(self, **kwargs):
            self.calls.append(kwargs)
            return {"text": "hey", "meta_info": {"prompt_tokens": 1}}

    engine = FakeEngine()
    backend = sgl.EngineBackend(engine)
    assert backend.get_chat_template().name == "qwen"

    @sgl.function
    def prog(s):
        s += "x" + sgl.gen("y", max_tokens=2)

    assert prog.run(backend=backend)["y"] == "hey"
    assert engine.calls[0]["prompt"] == "x" and "text" not in engine.calls[0]
    assert engine.calls[0]["sampling_params"]["max_new_tokens"] == 2
