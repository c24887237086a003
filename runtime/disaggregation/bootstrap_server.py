"""The prefill server's bootstrap server: upstream's HTTP routes on `--disaggregation-bootstrap-port`.

The router tells the decode server this address (`bootstrap_host`, `bootstrap_port`); the decode
server asks it where the prefill rank's transfer endpoint is. Routes, as upstream's:
- `GET /health`: 200 "OK";
- `PUT /route`: a prefill rank registers `{"role": "Prefill", "rank_ip", "rank_port",
  "attn_tp_rank", "attn_dp_rank", "pp_rank", ...}`;
- `GET /route?engine_rank=R&target_dp_group=G`: that rank's `{"rank_ip", "rank_port"}` (404 when
  none registered); `engine_rank=-1` answers the prefill's parallel layout
  (`prefill_attn_tp_size`, `prefill_dp_size`, `prefill_pp_size`, `prefill_page_size`).
It runs on a daemon thread of the prefill scheduler process and holds no request state.
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

logger = logging.getLogger(__name__)


class BootstrapServer:
    def __init__(self, host: str, port: int, page_size: int) -> None:
        self.routes: dict[tuple[int, int], dict[str, Any]] = {}
        """(engine rank, dp group) -> the registration body of that prefill rank."""
        self.page_size = page_size
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="pd-bootstrap", daemon=True)

    def start(self) -> None:
        self._thread.start()
        logger.info("PD bootstrap server on port %d", self.port)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def register(self, body: dict[str, Any]) -> None:
        key = (int(body.get("attn_tp_rank", 0)), int(body.get("attn_dp_rank", 0)))
        with self._lock:
            self.routes[key] = body

    def lookup(self, engine_rank: int, dp_group: int) -> dict[str, Any] | None:
        if engine_rank == -1:
            return {
                "prefill_attn_tp_size": 1,
                "prefill_dp_size": 1,
                "prefill_pp_size": 1,
                "prefill_page_size": self.page_size,
            }
        with self._lock:
            body = self.routes.get((engine_rank, dp_group))
        return None if body is None else {"rank_ip": body["rank_ip"], "rank_port": body["rank_port"]}


def _handler(server: BootstrapServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            if url.path == "/health":
                self._reply(HTTPStatus.OK, "OK")
            elif url.path == "/route":
                query = parse_qs(url.query)
                try:
                    rank = int(query.get("engine_rank", ["0"])[0])
                    group = int(query.get("target_dp_group", ["0"])[0])
                except ValueError:
                    self._reply(HTTPStatus.BAD_REQUEST, "engine_rank and target_dp_group must be integers")
                    return
                found = server.lookup(rank, group)
                if found is None:
                    self._reply(HTTPStatus.NOT_FOUND, f"no prefill rank {rank} in dp group {group} registered")
                else:
                    self._reply(HTTPStatus.OK, found)
            else:
                self._reply(HTTPStatus.NOT_FOUND, "not found")

        def do_PUT(self) -> None:
            if urlparse(self.path).path != "/route":
                self._reply(HTTPStatus.NOT_FOUND, "not found")
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                if not isinstance(body, dict) or "rank_ip" not in body or "rank_port" not in body:
                    raise ValueError("a registration needs rank_ip and rank_port")
                server.register(body)
            except (ValueError, TypeError) as e:
                self._reply(HTTPStatus.BAD_REQUEST, str(e))
                return
            self._reply(HTTPStatus.OK, "OK")

        def _reply(self, status: HTTPStatus, body: Any) -> None:
            data = (json.dumps(body) if isinstance(body, dict) else body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if isinstance(body, dict) else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("bootstrap: " + format, *args)

    return Handler
