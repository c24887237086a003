"""A stand-in model server for the launcher's tests, run as a script: `python fake_model_server.py
PORT MODE`. It starts a child (`sleep`) in its own process group, prints the child's pid, and then:

- `ready`: answers /health 200 and /v1/models with one model (behind `$FAKE_API_KEY` when set);
- `no-model`: answers /health 200 and /v1/models with an empty list, forever;
- `exit`: prints a last words line and exits with 3 before listening.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LAST_WORDS = "fake server: giving up before listening"


def main() -> None:
    port, mode = int(sys.argv[1]), sys.argv[2]
    child = subprocess.Popen(["sleep", "600"])
    print(f"child {child.pid}", flush=True)
    if mode == "exit":
        print(LAST_WORDS, flush=True)
        sys.exit(3)
    key = os.environ.get("FAKE_API_KEY")
    models = [{"id": "fake"}] if mode == "ready" else []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                self._reply(200, {})
            elif self.path == "/v1/models" and key and self.headers.get("Authorization") != f"Bearer {key}":
                self._reply(401, {"error": "no key"})
            elif self.path == "/v1/models":
                self._reply(200, {"data": models})
            else:
                self._reply(404, {})

        def _reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
