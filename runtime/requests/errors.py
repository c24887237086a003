"""The one error of a request's parsing and admission: bad input from the client (HTTP 400)."""

from __future__ import annotations


class InvalidRequestError(ValueError):
    """Bad input from the client; `param` names the offending field (HTTP 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
