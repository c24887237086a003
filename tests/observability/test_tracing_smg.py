"""Tracing through SGLang's router: smg 1.13 (from PyPI, in its own venv) in front of the traced
server forwards the client's W3C `traceparent`, so the worker's spans hang under the client's
span with no trace flags on smg itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang.ci.servers import RunningServer, ServerGroup
from tests.clients.routers import start_router, wait_for_workers
from tests.clients.venvs import SMG, ensure_venv

from .otlp_receiver import OtlpReceiver
from .test_tracing import check_tree, new_traceparent, request_spans


@pytest.mark.slow
def test_spans_under_client_traceparent_through_smg(
    traced_server: RunningServer, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    venv = ensure_venv(SMG)
    with ServerGroup(tmp_path) as group:
        router = start_router(group, venv, "smg", [traced_server.url], "round_robin")
        router.wait_ready(timeout=60)
        wait_for_workers(router, {traced_server.url})
        model = router.get("/v1/models").json()["data"][0]["id"]
        requests = [
            ("/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": 2}}),
            ("/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 2}),
            (
                "/v1/chat/completions",
                {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
            ),
        ]
        with router.client() as http:
            for path, body in requests:
                header, trace_id, span_id = new_traceparent()
                response = http.post(path, json=body, headers={"traceparent": header})
                assert response.status_code == 200, (path, response.text)
                check_tree(request_spans(receiver, trace_id), span_id)
