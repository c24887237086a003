"""Submits a workload's requests concurrently through the Engine's async API and records what
came back, without judging it (the oracle and the invariants do)."""

from __future__ import annotations

import asyncio
import traceback
from dataclasses import dataclass, field
from typing import Any

from sglang.ci.suites.schedule_fuzz.workload import RequestSpec, Workload
from sglang.runtime.engine import Engine


@dataclass
class RequestOutcome:
    """What one request delivered. `outputs` holds the final output of each sequence (`n` of
    them), or for a stream its last chunk; `chunks` every chunk a stream delivered, in order;
    `error` the exception that escaped, if any."""

    spec: RequestSpec
    outputs: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def closed_early(self) -> bool:
        """The client closed its stream before the request finished (an abort mid-stream)."""
        return bool(self.chunks) and self.chunks[-1]["meta_info"]["finish_reason"] is None


async def run_request(engine: Engine, spec: RequestSpec) -> RequestOutcome:
    outcome = RequestOutcome(spec)
    try:
        if not spec.stream:
            result = await engine.async_generate(**spec.generate_kwargs())
            outcome.outputs = result if isinstance(result, list) else [result]
            return outcome
        stream = await engine.async_generate(stream=True, **spec.generate_kwargs())
        try:
            async for chunk in stream:
                outcome.chunks.append(chunk)
                if spec.abort_after is not None and len(outcome.chunks) >= spec.abort_after:
                    break
        finally:
            await stream.aclose()  # before the end, this aborts the request in the scheduler
        outcome.outputs = outcome.chunks[-1:]
    except Exception as exc:  # recorded, and reported as an escaped exception by the test
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        outcome.error = f"{type(exc).__name__}: {exc} (raised at {frame.filename}:{frame.lineno})"
    return outcome


def run_workload(engine: Engine, workload: Workload) -> list[RequestOutcome]:
    """Every request of `workload`, each from its own task, all submitted at once."""

    async def run_all() -> list[RequestOutcome]:
        return list(await asyncio.gather(*(run_request(engine, spec) for spec in workload.requests)))

    return asyncio.run(run_all())
