"""A cpu C++ kernel build that fails: the family is ineligible with the compiler's reason, and a
server still answers on the next family."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sglang.platforms import base as platform_module
from sglang.platforms.base import ModelFacts
from sglang.platforms.cache import ENV_VAR, cache_root
from sglang.platforms.cpu.platform import CpuPlatform
from sglang.platforms.kernels.cpu_cpp.compiler import failure_reason
from sglang.platforms.kernels.cpu_cpp.family import FAMILY as CPU_CPP

REASON = "sglang_cpu_cpp kernels failed to build with c++: fatal error: omp.h: No such file or directory"


def test_reason_is_the_compilers_first_error() -> None:
    output = [
        "[1/5] c++ -MMD -c quant_linear.cpp -o quant_linear.o -Werror=format\n",
        "FAILED: decode_glue.o\n",
        "decode_glue.cpp:1:10: fatal error: omp.h: No such file or directory\n",
        "RuntimeError: Error building extension 'sglang_cpu_cpp'\n",
    ]
    assert failure_reason(output) == "decode_glue.cpp:1:10: fatal error: omp.h: No such file or directory"
    assert failure_reason(["FAILED: quant_linear.o\n", "ninja: build stopped\n"]) == "FAILED: quant_linear.o"
    assert failure_reason([]) == "no output"


def test_failed_family_loses_every_op_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform_module, "probe_failure", lambda name: REASON if name == "cpu_cpp" else None)
    table = CpuPlatform().select_ops(ModelFacts(dtype=torch.float32, weight_format="dense,int4_g32"))
    assert table["attention_backend"].chosen.family == "torch_native"
    assert table["mla_backend"].chosen.family == "torch_native"
    assert table["linear"].chosen.family == "reference"
    lost = [r for c in table.choices for r in c.rejected if r.candidate.family == "cpu_cpp"]
    assert {r.candidate.qualname for r in lost} == {c.qualname for c in CPU_CPP.candidates}
    assert all(r.reason == REASON and not r.eligible for r in lost)
    assert REASON in table.render()


def test_generate_answers_when_the_compiler_fails(tmp_path: Path) -> None:
    """`CXX=/bin/false` and an empty kernel cache: the start logs the compiler's reason and the
    ways out, and the model still answers (on torch_native and the references)."""
    converted = cache_root("gguf")
    if converted.is_dir():  # the model conversion is not under test: reuse it
        (tmp_path / "gguf").symlink_to(converted)
    env = {**os.environ, "CXX": "/bin/false", ENV_VAR: str(tmp_path)}
    prompt = ["--prompt", "What is the capital of France?", "--max-new-tokens", "8"]
    command = [sys.executable, "-m", "sglang.cli", "generate", *prompt]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Paris" in done.stdout
    assert "kernels failed to build with /bin/false" in done.stderr
    assert "--op-backend" in done.stderr and "--reference-ops" in done.stderr
    assert "attention_backend=torch_native" in done.stderr
    assert not list((tmp_path / "torch_extensions").glob("sglang_cpu_cpp-*")), "a failed build was cached"
