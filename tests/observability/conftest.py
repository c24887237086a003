"""One traced server for the package's tests (`--enable-trace` exporting OTLP/HTTP to a receiver
the test starts), small enough that a few concurrent requests fill its running batch."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from sglang.ci.servers import RunningServer, ServerGroup, serve_spec

from .otlp_receiver import OtlpReceiver

MAX_RUNNING = 2
"""Running-batch size of the traced server: a third concurrent request waits in the queue."""


@pytest.fixture(scope="package")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="package")
def traced_server(receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    flags = ("--enable-trace", "--otlp-traces-endpoint", receiver.endpoint, "--max-total-tokens", "4096")
    env = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "SGLANG_OTLP_EXPORTER_SCHEDULE_DELAY_MILLIS": "50"}
    spec = serve_spec(*flags, "--max-running-requests", str(MAX_RUNNING), env=env, name="traced")
    with ServerGroup(tmp_path_factory.mktemp("traced")) as group:
        yield group.launch(spec)


@pytest.fixture(scope="package")
def http(traced_server: RunningServer) -> Iterator[httpx.Client]:
    with traced_server.client() as client:
        yield client
