"""Stands in for `python -m sglang.launch_server` in Runtime tests: serves the fake SGLang API."""

from __future__ import annotations

import argparse

from .fake_servers import FakeSGLangServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--model-path")
    parser.add_argument("--log-level")
    parser.add_argument("--fail", action="store_true")
    args = parser.parse_args()
    if args.fail:
        raise SystemExit("cannot load the model")
    server = FakeSGLangServer(port=args.port)
    server.model_info["model_path"] = args.model_path
    server.httpd.serve_forever(0.05)


if __name__ == "__main__":
    main()
