"""Errors of the frontend language, each naming what the user can do about it."""

from __future__ import annotations

import traceback


class TracingError(TypeError):
    """A program used the value of an argument or variable that does not exist while tracing."""


class StopTracing(Exception):
    """Raised inside a prefix-only trace at the first expression whose text is not constant."""


class BackendCapabilityError(RuntimeError):
    """The backend cannot do what the program asked (images, select on a chat-only API, ...)."""


class ProgramError(RuntimeError):
    """A program stream failed on its executor thread; raised where the caller reads from it.

    `__cause__` is the original exception, whose traceback points into the failing backend call;
    the message carries that traceback too, so it survives logging that drops the chain.
    """

    def __init__(self, cause: BaseException):
        self.cause = cause
        trace = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
        super().__init__(f"{type(cause).__name__}: {cause}\n--- traceback of the program stream ---\n{trace}")
