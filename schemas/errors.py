"""One error hierarchy; every error maps to a result status or to the DLQ."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import ValidationError
from pydantic_core import ErrorDetails

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

    pydantic's own `str(exc)` quotes the input values: these messages do not. Where a value
    could be one of several forms (an input: a tensor or text), only the form it came
    closest to speaks (`_one_form`), and the paths name fields, not pydantic's labels.
    """
    errors = _one_form(exc.errors(include_url=False, include_input=False))
    shown = errors if limit is None else errors[:limit]
    parts = [f"{'.'.join(str(p) for p in loc) or '<event>'}: {msg}" for loc, msg in shown]
    more = len(errors) - len(shown)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


Loc = tuple[int | str, ...]


def _form_at(loc: Loc) -> int | None:
    """Where in `loc` pydantic names a union member it tried (`TextInput`, `str`,
    `function-after[...]`); None when it names none."""
    for i, part in enumerate(loc):
        if isinstance(part, str) and (part in _FORM_LABELS or part.startswith("function-")):
            return i
    return None


_FORM_LABELS = frozenset({"Tensor", "TextInput", "str", "list[str]"})
"""pydantic's labels of the members of the request's unions (`inputs` values, `text`)."""


def _misfit(errors: Sequence[ErrorDetails]) -> tuple[int, int]:
    """How far a value is from one union member: its missing fields, then its errors."""
    return sum(e["type"] == "missing" for e in errors), len(errors)


def _one_form(errors: Sequence[ErrorDetails]) -> list[tuple[Loc, str]]:
    """(path, message) per error, each union answered by the member(s) the value came
    closest to (`_misfit`), member labels left out, repeats once.

    A tensor with an unknown dtype read `inputs.x.function-after[_one_payload(),
    Tensor].dtype: ...; inputs.x.TextInput.text: Field required`; it now reads
    `inputs.x.dtype: ...`.
    """
    by_union: dict[Loc, dict[str, list[ErrorDetails]]] = {}
    for err in errors:
        loc = tuple(err["loc"])
        at = _form_at(loc)
        if at is not None:
            by_union.setdefault(loc[:at], {}).setdefault(str(loc[at]), []).append(err)
    dropped: set[int] = set()
    for members in by_union.values():
        best = min(_misfit(errs) for errs in members.values())
        dropped |= {id(e) for errs in members.values() if _misfit(errs) != best for e in errs}
    out: list[tuple[Loc, str]] = []
    for err in errors:
        if id(err) in dropped:
            continue
        item = (tuple(p for p in err["loc"] if _form_at((p,)) is None), err["msg"])
        if item not in out:
            out.append(item)
    return out
