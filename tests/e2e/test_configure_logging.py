"""Upstream's `/configure_logging` against a real server: the per-request log line turns on and
off, the log level changes in the HTTP and scheduler processes, and what is not served (request
and crash dumps) or not a level is a 400."""

from __future__ import annotations

import httpx

from sglang.ci.servers import RunningServer, wait_until


def test_configure_logging(http: httpx.Client, server: RunningServer) -> None:
    assert http.post("/configure_logging", json={"log_requests": True}).status_code == 200
    try:
        request_id = http.get("/v1/models").headers["X-Request-Id"]
        line = f"{request_id} GET /v1/models -> 200"
        wait_until(lambda: line in server.log_tail(20000), 10, what="the request line")
        assert http.post("/configure_logging", json={"log_level": "warning"}).status_code == 200
        assert http.post("/configure_logging", json={"log_level": "debug"}).status_code == 200
        wait_until(lambda: "'log_level': 'debug'" in server.log_tail(20000), 10, what="the configuration line")
    finally:
        assert http.post("/configure_logging", json={"log_requests": False, "log_level": "info"}).status_code == 200
    request_id = http.get("/v1/models").headers["X-Request-Id"]
    assert request_id not in server.log_tail(20000)
    for body in ({"log_level": "loud"}, {"crash_dump_folder": "/tmp/x"}, {"log_requests": "yes"}, {"bogus": 1}):
        response = http.post("/configure_logging", json=body)
        assert response.status_code == 400 and "error" in response.json(), body
