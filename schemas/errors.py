"""One error hierarchy; every error maps to a result status or to the DLQ."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from schemas.result import Status

MESSAGE_MAX_CHARS = 1000
"""The longest error message a result or a log line carries: one that quotes what a
request sent (10,000 unknown input names, a shape of rank 10,000) is cut, said, so a bad
event never earns a result larger than itself."""


CONTEXT_MAX_CHARS = 200
"""The longest keyword context an error's text adds after its message."""


def bounded(text: str, limit: int = MESSAGE_MAX_CHARS) -> str:
    """`text`, or as much of it as fits in `limit` characters with a note of how many more
    there were."""
    if len(text) <= limit:
        return text
    note = f"… (+{len(text)} characters in all)"
    return text[: max(0, limit - len(note))] + note


class InferbusError(Exception):
    """Base of every inferbus error; carries keyword context for logs and results."""

    status: ClassVar[Status] = "internal_error"

    def __init__(self, message: str, **context: Any) -> None:
        message = bounded(message)
        super().__init__(message)
        self.message = message
        self.context = context

    def __str__(self) -> str:
        if not self.context:
            return self.message
        details = " ".join(f"{k}={v}" for k, v in sorted(self.context.items()))
        return f"{self.message} ({bounded(details, CONTEXT_MAX_CHARS)})"


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
    """pydantic's errors as `field.path: message; ...`, the first `limit` distinct ones.

    pydantic's own `str(exc)` quotes the input values: these messages do not. An input of a
    request is a tensor or text: only the form it was meant as speaks (`_one_form`), and
    paths name fields, not pydantic's labels for the forms. Bounded: the request's lists and
    maps stop at their first bad item (`fail_fast`), and messages stop at `limit`.
    """
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    distinct = list(dict.fromkeys(_one_form(errors)))  # in order, repeats once
    shown = distinct if limit is None else distinct[:limit]
    more = len(distinct) - len(shown)
    parts = [f"{'.'.join(str(p) for p in loc) or '<event>'}: {msg}" for loc, msg in shown]
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


Loc = tuple[int | str, ...]

_TEXT = "TextInput"
"""pydantic's label of the text form of an input (`inputs.<name>.TextInput...`)."""
_TEXT_FORMS = frozenset({"str", "list[str]"})
"""pydantic's labels of the members of `TextInput.text` (one string or a list)."""


def _is_label(loc: Loc, i: int) -> bool:
    """Whether `loc[i]` is pydantic's name for a form it tried, not a field or a key: only
    where the request's unions put one (`inputs.<name>.<form>`, `...TextInput.text.<form>`),
    so an input a user named `Tensor` or `str` keeps its name."""
    part = loc[i]
    if len(loc) < 3 or loc[0] != "inputs" or not isinstance(part, str):
        return False
    if i == 2:
        return part in (_TEXT, "Tensor") or part.startswith("function-")
    return i == 4 and loc[2] == _TEXT and loc[3] == "text" and part in _TEXT_FORMS


def _one_form(errors: Sequence[ErrorDetails]) -> Iterator[tuple[Loc, str]]:
    """(path, message) per error, labels left out, each input answered as the form it was
    meant as: text when it has a `text` key, else a tensor (so `{"data": [1]}` is told what
    a tensor lacks, not that text needs `text`). One pass finds the inputs that lack
    `text`, a second yields the rest.

    A tensor with an unknown dtype read `inputs.x.function-after[_one_payload(),
    Tensor].dtype: ...; inputs.x.TextInput.text: Field required`; it now reads
    `inputs.x.dtype: ...`.
    """
    not_text = {
        tuple(e["loc"][:2])
        for e in errors
        if e["type"] == "missing" and tuple(e["loc"][2:]) == (_TEXT, "text")
    }
    for e in errors:
        loc = tuple(e["loc"])
        if len(loc) > 2 and _is_label(loc, 2):
            as_text = loc[2] == _TEXT
            if as_text == (loc[:2] in not_text):
                continue  # the other form's complaint
        yield tuple(p for i, p in enumerate(loc) if not _is_label(loc, i)), e["msg"]
