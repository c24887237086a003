"""`RuntimeEndpoint`: the native protocol over HTTP, to any SGLang-compatible server."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from sglang.frontend.backend.http import HttpClient, ServerError
from sglang.frontend.backend.native import NativeBackend

logger = logging.getLogger(__name__)


class RuntimeEndpoint(NativeBackend):
    """Connects at construction (GET /get_model_info) so a wrong URL fails where it is written."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        verify: bool | str | None = None,
        chat_template_name: str | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.http = HttpClient(self.base_url, api_key, verify=True if verify is None else verify)
        super().__init__(self.http.get("/get_model_info") or {}, chat_template_name)

    def _generate(self, body: dict[str, Any]) -> Any:
        return self.http.post("/generate", body)

    def _generate_stream(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        return self.http.post_sse("/generate", body)

    def _concat_and_append(self, body: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return self.http.post("/concat_and_append", body)
        except ServerError as e:
            if e.status in (404, 405, 501):  # an older server, or not ours
                return None
            logger.warning("/concat_and_append failed, joining text only: %s", e)
            return {"ok": False, "reason": str(e)}

    def flush_cache(self) -> None:
        self.http.post("/flush_cache")

    def get_server_info(self) -> dict[str, Any]:
        return self.http.get("/get_server_info")

    def shutdown(self) -> None:
        self.http.close()

    def __repr__(self) -> str:
        return f"RuntimeEndpoint({self.base_url!r}, model={self.get_model_name()!r})"
