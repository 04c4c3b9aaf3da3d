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


def _is_label(loc: Loc, i: int) -> bool:
    """Whether `loc[i]` is pydantic's name for a union member it tried, not a field or key."""
    part = loc[i]
    if not isinstance(part, str) or i == 0:
        return False
    if part in _TEXT_FORMS:  # `text`'s own union; elsewhere such a word is a user's key
        return loc[i - 1] == "text"
    return part in _FORM_LABELS or part.startswith("function-")


def _form_at(loc: Loc) -> int | None:
    """Where in `loc` pydantic first names a union member it tried (`TextInput`,
    `function-after[...]`); None when it names none."""
    return next((i for i in range(len(loc)) if _is_label(loc, i)), None)


_FORM_LABELS = frozenset({"Tensor", "TextInput"})
"""pydantic's labels of the members of an input's union (tensor or text)."""
_TEXT_FORMS = frozenset({"str", "list[str]"})
"""pydantic's labels of the members of `TextInput.text` (one string or a list)."""


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
        loc = tuple(err["loc"])
        item = (tuple(p for i, p in enumerate(loc) if not _is_label(loc, i)), err["msg"])
        if item not in out:
            out.append(item)
    return out
