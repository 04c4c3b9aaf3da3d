"""`inferbus infer`: turn friendly JSON inputs into a request, send it, await the result."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from infra.models.repository import ModelRepository
from schemas.errors import InvalidInput, ModelNotFound
from schemas.result import InferenceResult
from schemas.tensors import Tensor, TensorDecodeError, TextInput
from schemas.topics import Tier
from services.cli.common import SettingsInvalid
from services.client import InferenceClient
from services.client.sync import server_timeout_ms
from tracing.setup import init_tracing, shutdown_tracing


def parse_inputs(
    payload: Any,
    dtypes: Mapping[str, str] | None,
    *,
    unknown_model: str = "",
    takes_text: bool = False,
) -> dict[str, Tensor | TextInput]:
    """`{"x": [[...]]}` (dtype from the model), wire tensors, or `{"text": "..."}` /
    `{"text": ["a", "b"]}` (text for a model with a tokenizer; one sample a string).

    `dtypes`: the model's inputs, None when the model is not in the local repository
    (`unknown_model` then says which and what is there). `takes_text`: the model has a
    tokenizer, so a value under a name it has no tensor for was meant as text."""
    if not isinstance(payload, dict):
        raise InvalidInput('--json: inputs must be a JSON object such as {"x": [[0.1, 0.2]]}')
    if not payload:
        example = '{"text": "where is my parcel"}' if takes_text else '{"x": [[0.1]]}'
        raise InvalidInput(f"--json: the inputs are empty; give at least one, e.g. {example}")
    out: dict[str, Tensor | TextInput] = {}
    for name, value in payload.items():
        if isinstance(value, dict) and "dtype" in value:
            out[name] = Tensor.model_validate(value)
        elif isinstance(value, dict) and "text" in value:
            out[name] = TextInput.model_validate(value)
        elif isinstance(value, str) or (
            isinstance(value, list) and value and all(isinstance(v, str) for v in value)
        ):
            out[name] = TextInput(text=value)
        else:
            if dtypes is None:
                raise InvalidInput(
                    f"input {name!r}: {unknown_model}, so its dtype is unknown; give a "
                    'wire-format tensor {"dtype": ..., "shape": ..., "data": ...} or pass '
                    "--models DIR"
                )
            dtype = dtypes.get(name)
            if dtype is None and takes_text:
                raise InvalidInput(
                    f"input {name!r}: text must be a string or a list of strings, not "
                    f"{type(value).__name__} {_json_text(value)} (or send the model's tensors: "
                    f"{', '.join(sorted(dtypes))})"
                )
            if dtype is None:
                raise InvalidInput(
                    f"input {name!r}: the model has no such input; it takes "
                    f"{', '.join(sorted(dtypes)) or 'none'}"
                )
            out[name] = Tensor.from_numpy(_checked_array(name, value, dtype))
    return out


def _json_text(value: Any, limit: int = 40) -> str:
    """`value` as JSON, cut at `limit` characters, for an error message."""
    text = json.dumps(value)
    return text if len(text) <= limit else f"{text[:limit]}…"


def _checked_array(name: str, value: Any, dtype: str) -> np.ndarray[Any, Any]:
    """A nested list as the model's dtype, by the rules a worker applies to `data` (no
    fraction truncated to an integer, no value beyond the dtype's range, no strings)."""
    if not isinstance(value, list):
        raise InvalidInput(
            f"input {name!r} must be a nested list with a leading batch dimension, "
            f"e.g. [[1, 2]], not {type(value).__name__} {_json_text(value)}"
        )
    try:
        shape = list(np.shape(value))
        return Tensor(dtype=dtype, shape=shape, data=value).to_numpy()
    except (ValueError, TensorDecodeError) as exc:
        raise InvalidInput(f"input {name!r} is not a {dtype} array: {exc}") from None


def read_inputs(text: str, stdin: TextIO) -> str:
    """`--json`'s text: inline JSON, `@path` (a file) or `-` (standard input)."""
    if text == "-":
        return stdin.read()
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidInput(f"--json {text}: cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"--json {text}: {path} is not UTF-8 text (byte {exc.start})"
            ) from None
    return text


def printable(result: InferenceResult) -> InferenceResult:
    """`result` with every output as a nested list (`data`): a binary frame's `raw` outputs
    point into bytes after the envelope, which printed JSON would not carry."""
    if not result.outputs:
        return result
    outputs = {name: Tensor.from_numpy(result.output(name)) for name in result.outputs}
    return result.model_copy(update={"outputs": outputs})


async def infer_once(
    bootstrap: str, models_dir: Path, model: str, payload: Any, *, tier: Tier, timeout_s: float
) -> InferenceResult:
    """One request through the bus."""
    repository = ModelRepository(models_dir)
    dtypes: dict[str, str] | None
    takes_text = False
    try:
        config = repository.config(model)
        dtypes = {spec.name: spec.dtype for spec in config.inputs}
        takes_text = config.tokenizer is not None
    except ModelNotFound:
        dtypes = None
    inputs = parse_inputs(
        payload, dtypes, unknown_model=_not_there(models_dir, model), takes_text=takes_text
    )
    try:
        client = InferenceClient(bootstrap)
    except ValueError:  # the only argument it checks here
        raise SettingsInvalid(
            f"--bootstrap {bootstrap!r} is not host:port[,host:port...] (numeric ports)"
        ) from None
    # Built before connecting: what the request refuses is said at once. The server drops
    # what nobody waits for any more; --timeout inf (or past the wire's bound) is no error.
    try:
        request = client.build_request(
            model, inputs, tier=tier, timeout_ms=server_timeout_ms(timeout_s)
        )
    except ValueError as exc:  # the model's name, say: one line, not a traceback
        raise InvalidInput(str(exc)) from None
    init_tracing("inferbus-client", instance_id=client.client_id)
    try:
        async with client:
            return await client.infer(request, timeout_s=timeout_s)
    finally:
        shutdown_tracing()


def _not_there(models_dir: Path, model: str) -> str:
    """Why `model`'s inputs are unknown: the folder is no repository, or lacks it."""
    if not models_dir.is_dir():
        return f"there is no model repository at {models_dir} (--models)"
    known = ", ".join(ModelRepository(models_dir).names()) or "no models"
    return f"model {model!r} is not in {models_dir} ({known})"
