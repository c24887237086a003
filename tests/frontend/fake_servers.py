"""Tiny real HTTP servers on 127.0.0.1 that answer like SGLang's native API and an OpenAI API.

They tokenize by character (one token per character) so token counts and logprob positions are
easy to state in tests, and they record every request (path and JSON body) they receive.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def char_logprob(ch: str) -> float:
    """The fake model's logprob of a character: vowels are likely, everything else less so."""
    return -0.1 if ch in "aeiou" else -1.0 - (ord(ch) % 5) / 10


class _Server:
    def __init__(self, port: int = 0) -> None:
        self.requests: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, events: list[Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for event in events:
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

            def do_GET(self) -> None:
                owner._record(self.path, None)
                owner.handle(self, self.path, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                owner._record(self.path, body)
                owner.handle(self, self.path, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def _record(self, path: str, body: Any) -> None:
        with self._lock:
            self.requests.append((path, body))

    def handle(self, handler: Any, path: str, body: Any) -> None:
        raise NotImplementedError

    def posts(self, path: str) -> list[Any]:
        return [b for p, b in self.requests if p == path and b is not None]

    def __enter__(self) -> _Server:
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class FakeSGLangServer(_Server):
    """/get_model_info, /generate (plain, batched, input_ids, streamed), /flush_cache, /health."""

    def __init__(
        self, reply: str = "Hello world", chat_template: str | None = None, fail_generate: bool = False, port: int = 0
    ):
        super().__init__(port)
        self.reply = reply
        self.fail_generate = fail_generate
        self.model_info: dict[str, Any] = {"model_path": "fake/Fake-Model", "tokenizer_path": "fake/Fake-Model"}
        if chat_template is not None:
            self.model_info["chat_template"] = chat_template

    def _one(self, text: str, body: dict[str, Any]) -> dict[str, Any]:
        params = body.get("sampling_params") or {}
        out = "" if params.get("max_new_tokens") == 0 else self.reply[: params.get("max_new_tokens", 128)]
        tokens = list(text)
        meta: dict[str, Any] = {
            "prompt_tokens": len(tokens),
            "completion_tokens": len(out),
            "cached_tokens": 0,
            "finish_reason": {"type": "length" if out else "stop"},
        }
        if body.get("return_logprob"):
            start = body.get("logprob_start_len", 0)
            meta["input_token_logprobs"] = [
                [None if i == 0 else char_logprob(t), ord(t), t] for i, t in enumerate(tokens) if i >= start
            ]
            meta["output_token_logprobs"] = [[char_logprob(c), ord(c), c] for c in out]
        return {"text": out, "meta_info": meta}

    def handle(self, handler: Any, path: str, body: Any) -> None:
        if path == "/get_model_info":
            handler._reply(200, self.model_info)
        elif path in ("/health", "/flush_cache"):
            handler._reply(200, {})
        elif path == "/get_server_info":
            handler._reply(200, {"version": "fake"})
        elif path == "/generate" and self.fail_generate:
            handler._reply(400, {"error": {"message": "bad request"}})
        elif path == "/generate" and "input_ids" in body:
            handler._reply(200, [self._one("".join(map(chr, ids)), body) for ids in body["input_ids"]])
        elif path == "/generate" and isinstance(body["text"], list):
            handler._reply(200, [self._one(t, body) for t in body["text"]])
        elif path == "/generate" and body.get("stream"):
            full = self._one(body["text"], body)
            steps = range(1, len(full["text"]) + 1)
            handler._sse([{"text": full["text"][:i], "meta_info": {"completion_tokens": i}} for i in steps])
        elif path == "/generate":
            handler._reply(200, self._one(body["text"], body))
        else:
            handler._reply(404, {"error": f"no route {path}"})


class FakeOpenAIServer(_Server):
    """/v1/chat/completions and /v1/completions (echo + logprobs supported unless `echo=False`)."""

    def __init__(self, reply: str = "Sure thing", echo: bool = True):
        super().__init__()
        self.reply = reply
        self.echo = echo

    def handle(self, handler: Any, path: str, body: Any) -> None:
        usage = {"prompt_tokens": 3, "completion_tokens": 2}
        if path == "/v1/chat/completions" and body.get("stream"):
            events = [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in self.reply.split(" ")]
            handler._sse(events)
        elif path == "/v1/chat/completions":
            choice = {"index": 0, "message": {"role": "assistant", "content": self.reply}, "finish_reason": "stop"}
            handler._reply(200, {"choices": [choice], "usage": usage})
        elif path == "/v1/completions" and body.get("echo"):
            if not self.echo:
                handler._reply(400, {"error": {"message": "echo is not supported"}})
                return
            handler._reply(200, {"choices": [self._echo(i, p) for i, p in enumerate(body["prompt"])], "usage": usage})
        elif path == "/v1/completions":
            handler._reply(
                200, {"choices": [{"index": 0, "text": self.reply, "finish_reason": "stop"}], "usage": usage}
            )
        else:
            handler._reply(404, {"error": f"no route {path}"})

    @staticmethod
    def _echo(index: int, prompt: str) -> dict[str, Any]:
        tokens = [*prompt, "!"]  # the echoed prompt, then one generated token
        logprobs = [None] + [char_logprob(c) for c in tokens[1:]]
        logprobs_obj = {"tokens": tokens, "token_logprobs": logprobs, "text_offset": list(range(len(tokens)))}
        return {"index": index, "text": prompt + "!", "logprobs": logprobs_obj}
