"""The same frontend programs against a cpu server and a tpu server (XLA:CPU): greedy fp32
outputs agree token for token, and each program's own checks pass on the tpu server.

Slow: the tpu server compiles one step per batch shape the programs produce (a dozen, each
5-20 s on a shared 2-core machine; XLA's part is skipped on a second run, from the persistent
compilation cache). Measured: about 5 minutes for the module with a partly warm cache.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import sglang as sgl
from sglang.ci.servers import STARTUP_TIMEOUT_S, RunningServer, ServerGroup, serve_spec
from sglang.ci.suites import programs

pytestmark = pytest.mark.slow

SERVER_FLAGS = ("--dtype", "float32", "--max-total-tokens", "4096")


TPU_STARTUP_TIMEOUT_S = 2 * STARTUP_TIMEOUT_S
"""The tpu server compiles its warm-up steps on XLA:CPU before it answers."""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RunningServer]]:
    with ServerGroup(tmp_path_factory.mktemp("cross-device")) as group:
        yield {
            "cpu": group.launch(serve_spec(*SERVER_FLAGS, device="cpu", name="cpu")),
            "tpu": group.launch(
                serve_spec(
                    *SERVER_FLAGS,
                    device="tpu",
                    name="tpu",
                    env={"JAX_PLATFORMS": "cpu"},
                    startup_timeout_s=TPU_STARTUP_TIMEOUT_S,
                )
            ),
        }


def _outputs() -> dict[str, object]:
    """Every program's generated text (and select's scores) on the default backend."""
    questions = ["What is the capital of Japan?", "What is the capital city of China?"]
    choice = programs.true_or_false.run(statement="The capital of Germany is Berlin.")
    forks = programs.parallel_decoding.run(topic="writing a good blog post", fork_size=3, temperature=0)
    return {
        "few_shot_qa": programs.few_shot_qa.run(
            question="What is the capital of the United Kingdom?", temperature=0
        ).text(),
        "few_shot_qa_batch": [
            s.text() for s in programs.few_shot_qa.run_batch([{"question": q} for q in questions], temperature=0)
        ],
        "multi_turn_chat": programs.answer_mt_bench.run(
            question_1="What is the capital of France?", question_2="And the capital of Germany?", temperature=0
        ).text(),
        "select": (choice["answer"], choice.get_meta_info("answer")["normalized_prompt_logprobs"]),
        "decode_json": programs.decode_json_regex.run(temperature=0).text(),
        "parallel_decoding": (forks.text(), forks["detailed_tip"]),
    }


def test_programs_agree_across_devices(servers: dict[str, RunningServer]) -> None:
    results = {}
    for device, server in servers.items():
        sgl.set_default_backend(sgl.RuntimeEndpoint(server.url))
        results[device] = _outputs()
    cpu, tpu = results["cpu"], results["tpu"]
    for name in cpu:
        if name == "select":
            assert cpu[name][0] == tpu[name][0], name
            assert cpu[name][1] == pytest.approx(tpu[name][1], abs=1e-3), name
        else:
            assert cpu[name] == tpu[name], f"{name}: cpu and tpu outputs differ"


@pytest.mark.parametrize(
    "check",
    [
        programs.check_few_shot_qa,
        programs.check_multi_turn_chat,
        programs.check_select,
        programs.check_decode_json,
        programs.check_parallel_decoding,
    ],
    ids=lambda c: c.__name__,
)
def test_program_checks_pass_on_tpu(check, servers: dict[str, RunningServer]) -> None:
    sgl.set_default_backend(sgl.RuntimeEndpoint(servers["tpu"].url))
    check()
