"""Torch profiler traces of the scheduler's model steps, on request: upstream SGLang's
`/start_profile` and `/stop_profile` (and `Engine.start_profile` / `stop_profile`).

A profile records the scheduler process from its start (at once, or when the scheduler reaches
its `start_step`-th model step) until `/stop_profile`, or for `num_steps` model steps. Its chrome
trace is then written to `output_dir` (default `$SGLANG_TORCH_PROFILER_DIR`, else `/tmp`) as
`[<prefix>-]<profile_id>-TP-0.trace.json.gz`, upstream's name (Perfetto and chrome://tracing open
it). The scheduler is tensor-parallel rank 0; the other ranks' processes are not recorded.

Activities, upstream's names: "CPU" (the host: every op and kernel call the scheduler makes),
"GPU" (the device's own timeline, where the platform declares a torch profiler activity for it;
host-only platforms record none and say so in the log), "MEM" (tensor allocations).

Invariants: at most one profile at a time; a profile that started stops once, and its trace is
on disk before `/stop_profile` returns (with `num_steps`, before the step after its last one).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torch.profiler import ProfilerActivity, profile

logger = logging.getLogger(__name__)

ACTIVITIES = ("CPU", "GPU", "MEM")
DEFAULT_ACTIVITIES = ("CPU", "GPU")
DIR_ENV = "SGLANG_TORCH_PROFILER_DIR"


class ProfileError(ValueError):
    """A request the profiler refuses (one already running, none to stop, an unknown activity)."""


UNSUPPORTED = {
    "profile_by_stage": False,
    "merge_profiles": False,
    "profile_stages": None,
    "detailed_annotations": False,
}
"""Upstream `ProfileReq` fields of features this runtime lacks: accepted at these defaults only."""


@dataclass(frozen=True)
class ProfileSettings:
    """Upstream's `ProfileReq` fields this runtime honours (`None`: upstream's default)."""

    output_dir: str | None = None
    start_step: int | None = None
    num_steps: int | None = None
    activities: tuple[str, ...] | None = None
    with_stack: bool | None = None
    record_shapes: bool | None = None
    profile_id: str | None = None
    profile_prefix: str | None = None

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ProfileSettings:
        """From a `/start_profile` body. Step counts may come as digit strings, as upstream's
        `python -m sglang.profiler` sends them."""
        fields: dict[str, Any] = {}
        for name, value in body.items():
            if name in UNSUPPORTED:
                if value not in (UNSUPPORTED[name], None):
                    raise ProfileError(f"{name} is not supported by this server")
            elif name == "req_type":  # upstream's envelope field: this route is always a start
                continue
            elif name not in cls.__dataclass_fields__:
                raise ProfileError(f"unknown field {name!r}")
            elif value is not None:
                fields[name] = _typed(name, value)
        return cls(**fields)


def _typed(name: str, value: Any) -> Any:
    if name in ("start_step", "num_steps"):
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        raise ProfileError(f"{name} must be a non-negative integer, got {value!r}")
    if name in ("with_stack", "record_shapes"):
        if isinstance(value, bool):
            return value
        raise ProfileError(f"{name} must be a boolean, got {value!r}")
    if name == "activities":
        if isinstance(value, list) and all(isinstance(a, str) for a in value):
            return tuple(value)
        raise ProfileError(f"activities must be a list of names, got {value!r}")
    if isinstance(value, str):
        return value
    raise ProfileError(f"{name} must be a string, got {value!r}")


def trace_dir(settings: ProfileSettings) -> Path:
    return Path(settings.output_dir or os.environ.get(DIR_ENV, "/tmp")).expanduser()


class StepProfiler:
    """One scheduler's profile state. `device_activity`: the torch profiler activity of the
    platform's device (`Platform.profiler_activity`), None for host-only platforms."""

    def __init__(self, device_activity: str | None) -> None:
        self.device_activity = device_activity
        self.steps = 0
        self._settings: ProfileSettings | None = None
        self._profile: profile | None = None
        self._start_at: int | None = None
        self._stop_at: int | None = None

    @property
    def active(self) -> bool:
        return self._settings is not None

    def start(self, settings: ProfileSettings) -> str:
        """Arms a profile (recording now unless `start_step` is later); returns what the log says."""
        if self.active:
            raise ProfileError("Profiling is already in progress. Call /stop_profile first.")
        unknown = sorted(set(settings.activities or ()) - set(ACTIVITIES))
        if unknown:
            raise ProfileError(f"unknown profiler activities {unknown}; this server records {list(ACTIVITIES)}")
        directory = trace_dir(settings)
        try:  # refused now, not when the trace is due (possibly in the middle of a step)
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ProfileError(f"cannot write traces to {directory}: {e}") from None
        if not os.access(directory, os.W_OK):
            raise ProfileError(f"cannot write traces to {directory}: not writable")
        self._settings = replace(settings, profile_id=settings.profile_id or str(time.time()))
        self._start_at = max(settings.start_step or 0, self.steps)
        self._stop_at = self._start_at + settings.num_steps if settings.num_steps else None
        if self._start_at == self.steps:
            self._begin()
        return f"Profiling starts at step {self._start_at}; traces go to {self._output_dir()}"

    def stop(self) -> str:
        """Ends the profile and writes its trace; returns the trace's path."""
        if not self.active:
            raise ProfileError("Profiling is not in progress. Call /start_profile first.")
        return self._end()

    def step_done(self) -> None:
        """Called after every model step: starts or ends a profile armed for this step."""
        self.steps += 1
        if self._settings is None:
            return
        if self._profile is None and self.steps == self._start_at:
            self._begin()
        elif self._stop_at is not None and self.steps >= self._stop_at:
            try:
                self._end()
            except OSError:  # the directory went away since the start: the steps go on
                logger.exception("profiling: the trace could not be written")

    def _output_dir(self) -> Path:
        assert self._settings is not None
        return trace_dir(self._settings)

    def _activities(self) -> list[ProfilerActivity]:
        assert self._settings is not None
        wanted = self._settings.activities or DEFAULT_ACTIVITIES
        chosen = [ProfilerActivity.CPU] if "CPU" in wanted else []
        if "GPU" in wanted:
            if self.device_activity is None:
                logger.info("profiling: this platform has no device timeline; the host's is recorded")
            else:
                chosen.append(getattr(ProfilerActivity, self.device_activity))
        return chosen or [ProfilerActivity.CPU]  # "MEM" alone still needs a timeline to attach to

    def _begin(self) -> None:
        assert self._settings is not None
        settings = self._settings
        self._profile = profile(
            activities=self._activities(),
            record_shapes=settings.record_shapes is not False,
            with_stack=settings.with_stack is not False,
            profile_memory="MEM" in (settings.activities or ()),
        )
        self._profile.start()
        logger.info("profiling from step %d, traces to %s", self.steps, self._output_dir())

    def _end(self) -> str:
        settings, recording, directory = self._settings, self._profile, self._output_dir()
        assert settings is not None
        self._settings = self._profile = self._start_at = self._stop_at = None
        if recording is None:  # stopped before its start step came
            return ""
        recording.stop()
        prefix = f"{settings.profile_prefix}-" if settings.profile_prefix else ""
        path = directory / f"{prefix}{settings.profile_id}-TP-0.trace.json.gz"
        recording.export_chrome_trace(str(path))
        logger.info("profile written: %s", path)
        return str(path)
