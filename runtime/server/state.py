"""What every request handler reaches through `request.app.state.server`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from sglang.runtime.observability.metrics import ServerMetrics
from sglang.runtime.processes.messages import ReadyInfo
from sglang.runtime.processes.tokenizer_manager import TokenizerManager
from sglang.runtime.requests.generate_input import InvalidRequestError
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
    paused: bool = False
    """Between `/pause_generation` and `/continue_generation`: `/ready` answers 503."""
    extras: dict[str, Any] = field(default_factory=dict)
    log_requests: bool = False
    """One log line per finished HTTP request: `--log-requests`, changed by `/configure_logging`."""

    def __post_init__(self) -> None:
        self.log_requests = self.args.log_requests

    @property
    def model_name(self) -> str:
        """The name the OpenAI API reports and accepts."""
        return self.args.served_model_name or self.info.model_path

    def metrics(self) -> ServerMetrics:
        """The server's metrics; made on the first call, and fed from then on with every
        request the tokenizer manager finishes."""
        if "metrics" not in self.extras:
            self.extras["metrics"] = ServerMetrics(self.model_name)
            self.manager.finish_observers.append(self.extras["metrics"].observe_finished)
        return self.extras["metrics"]

    def decode_ids(self, ids: list[int], param: str, **options: Any) -> str:
        """The text of token ids a client sent; ApiError (400, naming `param`) for an id outside
        the vocabulary, which the tokenizer would otherwise fail on (an id past int64 overflows)."""
        vocab = self.info.vocab_size
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise ApiError(400, f"token id {bad} is outside the vocabulary [0, {vocab})", param)
        return self.tokenizer.decode(ids, **options)

    def check_model(self, requested: str | None) -> str | None:
        """The LoRA adapter `requested` names (`<base>:<adapter>`, upstream's form), else None;
        404 for a model name this server does not serve, 400 for an adapter it has not loaded.
        None, empty, `default` (the name SGLang's own examples use) and `unknown` (what SGLang's
        routers fill in when a client names no model) mean the served model."""
        names = (self.model_name, self.info.model_path, "default", "unknown")
        if not requested or requested in names:
            return None
        base, sep, adapter = requested.rpartition(":")
        if sep and base in names and self.info.lora_enabled:
            try:
                self.manager.admission.check_adapter(adapter, "model")
            except InvalidRequestError as e:
                raise ApiError(400, str(e), "model") from None
            return adapter
        raise ApiError(404, f"model {requested!r} does not exist; this server serves {self.model_name!r}", "model")


def server_state(request: Request) -> ServerState:
    return request.app.state.server
