"""A small thread-safe JSON-over-HTTP client with server-sent-event streaming.

One `httpx.Client` per backend: connections are pooled and reused across the executor threads of
a whole `run_batch`. Generation requests have no read timeout (a long generation is not an
error); connecting does, so a server that is not there fails fast.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx


class ServerError(RuntimeError):
    """The server answered with an error status; the message carries its body."""

    def __init__(self, method: str, url: str, status: int, body: str):
        self.status = status
        self.body = body
        super().__init__(f"{method} {url} answered {status}: {body[:2000]}")


class HttpClient:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        connect_timeout: float = 10.0,
        verify: bool | str = True,
        max_connections: int = 512,
        headers: dict[str, str] | None = None,
    ):
        """`api_key` goes as a bearer token; `headers` are sent with every request besides."""
        headers = {**({"Authorization": f"Bearer {api_key}"} if api_key else {}), **(headers or {})}
        self.base_url = base_url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(None, connect=connect_timeout),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=64),
            verify=verify,
        )

    def get(self, path: str) -> Any:
        return self._json(self._client.get(path))

    def post(self, path: str, body: Any = None) -> Any:
        return self._json(self._client.post(path, json=body))

    def post_sse(self, path: str, body: Any) -> Iterator[dict[str, Any]]:
        """The JSON payloads of the `data:` events of a streamed response, up to `data: [DONE]`."""
        with self._client.stream("POST", path, json=body) as response:
            if response.status_code >= 400:
                response.read()
                raise ServerError("POST", str(response.url), response.status_code, response.text)
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators and SSE comments
                payload = line[len("data:") :].strip()
                if payload == "[DONE]":
                    return
                event = json.loads(payload)
                if isinstance(event, dict) and "error" in event and "text" not in event:
                    raise ServerError("POST", str(response.url), 500, payload)
                yield event

    def close(self) -> None:
        self._client.close()

    @staticmethod
    def _json(response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise ServerError(response.request.method, str(response.url), response.status_code, response.text)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return response.text
