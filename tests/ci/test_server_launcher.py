"""The launcher every suite and benchmark starts its servers with (`sglang.ci.servers`), against a
stand-in server script: readiness needs /health and a listed model, a failed start shows the log's
tail, and every process of a server's group is reaped however its block ends."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from sglang.ci.servers import (
    DONE,
    HOST,
    LaunchSpec,
    ServerGroup,
    free_port,
    launch,
    launched,
    serve_spec,
    sse_events,
    wait_until,
)

from .fake_model_server import LAST_WORDS

FAKE_SERVER = Path(__file__).with_name("fake_model_server.py")


def fake_spec(mode: str, **fields: object) -> LaunchSpec:
    port = free_port()
    return LaunchSpec((sys.executable, str(FAKE_SERVER), str(port), mode), port, name=f"fake-{mode}", **fields)


def child_pid(log: Path) -> int:
    """The pid of the `sleep` the stand-in started in its group (the first line of its log)."""
    line = wait_until(lambda: log.exists() and log.read_text().partition("\n")[0], timeout=30, what="child pid")
    return int(line.split()[1])


def gone(pid: int) -> bool:
    """No such process, or a zombie (its parent is gone and nothing reaped it yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def test_ready_server_is_reaped_with_its_children(tmp_path: Path) -> None:
    with launched(fake_spec("ready", api_key="sk-launcher", env={"FAKE_API_KEY": "sk-launcher"}), tmp_path) as server:
        assert server.url == f"http://{HOST}:{server.port}"
        assert server.model_name() == "fake"  # sent the key: without it /v1/models answers 401
        assert server.get("/v1/models", timeout=5).status_code == 200
        child = child_pid(server.log_path)
        assert not gone(child)
    assert server.process.returncode is not None
    wait_until(lambda: gone(child), timeout=10, what="the server's child killed")


def test_a_server_listing_no_model_is_not_ready(tmp_path: Path) -> None:
    started = time.monotonic()
    with (
        pytest.raises(RuntimeError, match="not ready after 2 s"),
        launched(fake_spec("no-model", startup_timeout_s=2), tmp_path),
    ):
        pass
    assert time.monotonic() - started < 30
    (log,) = tmp_path.glob("fake-no-model-*.log")
    wait_until(lambda: gone(child_pid(log)), timeout=10, what="the stopped server's child killed")


def test_a_server_that_exits_fails_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="exited with 3") as failure:
        launch(fake_spec("exit"), tmp_path)
    assert LAST_WORDS in str(failure.value)
    (log,) = tmp_path.glob("fake-exit-*.log")
    wait_until(lambda: gone(child_pid(log)), timeout=10, what="the exited server's child killed")


def test_group_stops_every_server_when_its_block_fails(tmp_path: Path) -> None:
    with pytest.raises(KeyError), ServerGroup(tmp_path) as group:
        servers = [group.launch(fake_spec("ready"), wait=False) for _ in range(2)]
        for server in servers:
            server.wait_ready()
        raise KeyError("a failing test")
    assert all(server.process.returncode is not None for server in servers)


def test_serve_spec_binds_loopback_and_passes_the_key() -> None:
    spec = serve_spec("--max-total-tokens", "64", device="cpu", api_key="sk-x", cpu_threads=2)
    argv = list(spec.argv)
    assert argv[argv.index("--host") + 1] == HOST
    assert argv[argv.index("--port") + 1] == str(spec.port)
    assert argv[argv.index("--cpu-threads") + 1] == "2"
    assert argv[argv.index("--api-key") + 1] == "sk-x"
    assert argv[-2:] == ["--max-total-tokens", "64"]
    assert spec.headers == {"Authorization": "Bearer sk-x"}
    assert "--cpu-threads" not in serve_spec(device="tpu").argv
    assert "--api-key" not in serve_spec().argv and serve_spec().headers == {}


def test_sse_events_decode_data_lines_only() -> None:
    lines = [": comment", "event: x", 'data: {"a": 1}', "", "data:[DONE]"]
    assert list(sse_events(lines)) == [{"a": 1}, DONE]
