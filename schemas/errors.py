"""One error hierarchy; every error maps to a result status or to the DLQ."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ValidationError

from schemas.result import Status


class InferbusError(Exception):
    """Base of every inferbus error; carries keyword context for logs and results."""

    status: ClassVar[Status] = "internal_error"

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def __str__(self) -> str:
        if not self.context:
            return self.message
        details = " ".join(f"{k}={v}" for k, v in sorted(self.context.items()))
        return f"{self.message} ({details})"


class InvalidInput(InferbusError):
    """The request is well-formed JSON but breaks the schema or the model's input contract."""

    status = "invalid_input"


class ModelNotFound(InferbusError):
    """The model (or the requested version) is not in the model repository."""

    status = "model_not_found"


class Unauthorized(InferbusError):
    """The tenant may not use this model or tier."""

    status = "unauthorized"


class DeadlineExceeded(InferbusError):
    """The request's deadline passed before it could be served."""

    status = "deadline_exceeded"


class Overloaded(InferbusError):
    """The tier's queue is over its bound; the request is rejected at once, not queued."""

    status = "rejected_overload"


class EngineError(InferbusError):
    """The engine failed on a batch or a request."""

    status = "internal_error"


class Unparseable(InferbusError):
    """The event has no usable request id to answer: it goes to the DLQ with its bytes."""


def describe_validation_error(exc: ValidationError, *, limit: int | None = 5) -> str:
    """pydantic's errors as `field.path: message; ...`, the first `limit` of them.

    pydantic's own `str(exc)` quotes the input values: these messages do not.
    """
    errors = exc.errors(include_url=False, include_input=False)
    shown = errors if limit is None else errors[:limit]
    parts = [f"{'.'.join(str(p) for p in err['loc']) or '<event>'}: {err['msg']}" for err in shown]
    more = len(errors) - len(shown)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")
