"""`EngineBackend`: the native protocol, in process, on `sglang.Engine` (no HTTP).

The engine is the runtime's: `sglang.Engine` is imported only when an engine is built here, so
the frontend imports without the runtime. The engine's `generate(prompt=..., ...)` takes the same
fields as the HTTP body (with `text` named `prompt`) and returns the same dicts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sglang.frontend.backend.native import NativeBackend


class EngineBackend(NativeBackend):
    def __init__(self, engine: Any = None, chat_template_name: str | None = None, **engine_args: Any):
        if engine is None:
            import sglang

            engine = sglang.Engine(**engine_args)
        self.engine = engine
        get_info = getattr(engine, "get_model_info", None)
        super().__init__(get_info() if callable(get_info) else {}, chat_template_name)

    @staticmethod
    def _as_engine_args(body: dict[str, Any]) -> dict[str, Any]:
        args = dict(body)
        if "text" in args:
            args["prompt"] = args.pop("text")
        return args

    def _generate(self, body: dict[str, Any]) -> Any:
        return self.engine.generate(**self._as_engine_args(body))

    def _generate_stream(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        return iter(self.engine.generate(**self._as_engine_args(body)))

    def _concat_and_append(self, body: dict[str, Any]) -> dict[str, Any] | None:
        concat = getattr(self.engine, "concat_and_append", None)
        return concat(**body) if callable(concat) else None

    def flush_cache(self) -> None:
        self.engine.flush_cache()

    def get_server_info(self) -> dict[str, Any]:
        get_info = getattr(self.engine, "get_server_info", None)
        return get_info() if callable(get_info) else {}

    def shutdown(self) -> None:
        self.engine.shutdown()
