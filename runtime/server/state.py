"""What every request handler reaches through `request.app.state.server`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from sglang.runtime.processes.messages import ReadyInfo
from sglang.runtime.processes.tokenizer_manager import TokenizerManager
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server_args import ServerArgs


@dataclass
class ServerState:
    args: ServerArgs
    info: ReadyInfo
    tokenizer: Any
    manager: TokenizerManager
    draining: bool = False
    """Set on SIGTERM/SIGINT: new requests get 503 while running ones finish."""
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def model_name(self) -> str:
        """The name the OpenAI API reports and accepts."""
        return self.args.served_model_name or self.info.model_path

    def check_model(self, requested: str | None) -> None:
        """404 for a model name this server does not serve. None, empty, `default` (the name
        SGLang's own examples use) and `unknown` (what SGLang's routers fill in when a client
        names no model) mean the served model."""
        if requested and requested not in (self.model_name, self.info.model_path, "default", "unknown"):
            raise ApiError(404, f"model {requested!r} does not exist; this server serves {self.model_name!r}", "model")


def server_state(request: Request) -> ServerState:
    return request.app.state.server
