"""`inferbus infer`: friendly inputs with errors that say what is wrong; outputs printed as
numbers, whichever form the result travelled in."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from schemas.errors import InvalidInput
from schemas.request import MAX_TIMEOUT_MS, InferenceRequest
from schemas.result import InferenceResult
from schemas.tensors import Tensor, TextInput
from services.cli.common import SettingsInvalid
from services.cli.infer import infer_once, parse_inputs, printable, read_inputs
from services.client import InferenceClient, WireRequest
from services.models.demo import write_demo_models
from services.runtime.result_wire import encode_result

OUTPUTS = {
    "y": np.array([[0.25, -1.5, 3.0, 0.125]], dtype=np.float32),
    "label": np.array([[7]], dtype=np.int64),
}


@pytest.mark.parametrize("form", ["frame", "b64", "list"])
def test_printed_outputs_are_the_values(form: str) -> None:
    value = encode_result(
        request_id="r-1", model="demo-mlp", status="ok", form=form, outputs=OUTPUTS
    )
    printed = json.loads(
        printable(InferenceResult.from_wire(value)).model_dump_json(exclude_none=True)
    )
    for name, array in OUTPUTS.items():
        tensor = printed["outputs"][name]
        assert "raw" not in tensor and "b64" not in tensor
        assert (tensor["dtype"], tensor["shape"]) == (str(array.dtype), list(array.shape))
        assert tensor["data"] == array.tolist()


def test_an_error_result_prints_as_it_is() -> None:
    value = encode_result(request_id="r-2", model="m", status="invalid_input", error="bad x")
    result = InferenceResult.from_wire(value)
    assert printable(result) == result


@pytest.mark.parametrize(
    ("payload", "dtypes", "message"),
    [
        pytest.param([1, 2], {"x": "float32"}, "must be a JSON object", id="not-an-object"),
        pytest.param({}, {"x": "float32"}, "the inputs are empty; give at least one", id="empty"),
        pytest.param(
            {"z": [[1.0]]}, {"x": "float32"}, "no such input; it takes x", id="wrong-input-name"
        ),
        pytest.param({"x": [[1.0]]}, None, "model 'nosuch' is not in models", id="model-not-local"),
        pytest.param({"x": [["a"]]}, {"x": "float32"}, "is not a float32 array", id="bad-values"),
        pytest.param(
            {"ids": [[101, 7.5]]}, {"ids": "int64"}, "holds 7.5; the tensor is int64", id="fraction"
        ),
        pytest.param({"ids": [[1e20]]}, {"ids": "int64"}, "beyond int64's range", id="overflow"),
        pytest.param({"x": [[1], [2, 3]]}, {"x": "float32"}, "not a float32 array", id="ragged"),
        pytest.param({"x": 5}, {"x": "float32"}, "must be a nested list .* not int 5", id="scalar"),
    ],
)
def test_inputs_that_cannot_be_sent_say_why(
    payload: object, dtypes: dict[str, str] | None, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_inputs(payload, dtypes, unknown_model="model 'nosuch' is not in models (demo-mlp)")


ENCODER_DTYPES = {"input_ids": "int64", "attention_mask": "int64"}
NOT_TEXT = "text must be a string or a list of strings, not"
TENSORS = r"\(or send the model's tensors: attention_mask, input_ids\)$"


@pytest.mark.parametrize(
    ("payload", "takes_text", "message"),
    [
        pytest.param({"text": 5}, True, f"^input 'text': {NOT_TEXT} int 5 {TENSORS}", id="number"),
        pytest.param({"text": None}, True, f"{NOT_TEXT} NoneType null", id="null"),
        pytest.param({"text": []}, True, rf"{NOT_TEXT} list \[\]", id="empty-list"),
        pytest.param({"q": ["a", 5]}, True, rf"'q': {NOT_TEXT} list \[", id="mixed-list"),
        # A model without a tokenizer takes no text: the name is what is wrong.
        pytest.param({"text": 5}, False, "'text': the model has no such input", id="no-tokenizer"),
        pytest.param({}, True, 'empty; give at least one, e.g. {"text": ', id="empty-text-model"),
    ],
)
def test_text_that_cannot_be_sent_says_what_text_is(
    payload: object, takes_text: bool, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_inputs(payload, ENCODER_DTYPES, takes_text=takes_text)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        pytest.param("demo-encoder", "'text': text must be a string", id="encoder-takes-text"),
        pytest.param("demo-mlp", "'text': the model has no such input; it takes x", id="mlp"),
    ],
)
async def test_infer_knows_which_local_models_take_text(
    tmp_path: Path, model: str, message: str
) -> None:
    write_demo_models(tmp_path)
    with pytest.raises(InvalidInput, match=message):  # refused before any broker is asked
        await infer_once(
            "127.0.0.1:1", tmp_path, model, {"text": 5}, tier="interactive", timeout_s=1
        )


def test_plain_lists_take_the_model_dtype() -> None:
    inputs = parse_inputs({"x": [[1, 2]], "note": "hi"}, {"x": "float32"})
    tensor, note = inputs["x"], inputs["note"]
    assert isinstance(tensor, Tensor) and tensor.to_numpy().dtype == np.float32
    assert isinstance(note, TextInput) and note.text == "hi"


@pytest.mark.parametrize(
    ("value", "texts"),
    [
        pytest.param("where is my parcel", ["where is my parcel"], id="one-string"),
        pytest.param(["a", "b"], ["a", "b"], id="a-list-of-strings"),
        pytest.param({"text": ["a", "b"]}, ["a", "b"], id="wire-form"),
    ],
)
def test_text_shortcuts(value: object, texts: list[str]) -> None:
    (text,) = parse_inputs({"text": value}, {"input_ids": "int64"}).values()
    assert isinstance(text, TextInput) and text.texts() == texts


def test_inputs_come_inline_from_a_file_or_from_standard_input(tmp_path: Path) -> None:
    path = tmp_path / "inputs.json"
    path.write_text('{"x": [[1]]}')
    assert read_inputs('{"x": [[2]]}', io.StringIO("unused")) == '{"x": [[2]]}'
    assert read_inputs(f"@{path}", io.StringIO("unused")) == '{"x": [[1]]}'
    assert read_inputs("-", io.StringIO('{"x": [[3]]}')) == '{"x": [[3]]}'
    with pytest.raises(InvalidInput, match=r"cannot read .*nope\.json"):
        read_inputs(f"@{tmp_path / 'nope.json'}", io.StringIO())
    (tmp_path / "latin1.json").write_bytes(b'{"text": "caf\xe9"}')
    with pytest.raises(InvalidInput, match=r"latin1\.json is not UTF-8 text \(byte 13\)"):
        read_inputs(f"@{tmp_path / 'latin1.json'}", io.StringIO())


WIRE_X = {"x": {"dtype": "float32", "shape": [1, 16], "data": [[1.0] * 16]}}


@pytest.mark.parametrize(
    ("timeout_s", "timeout_ms"),
    [
        pytest.param(math.inf, None, id="inf"),
        pytest.param(1e9, MAX_TIMEOUT_MS, id="past-the-wire-bound"),
        pytest.param(0.0015, 2, id="a-fraction-of-a-millisecond"),
    ],
)
async def test_any_timeout_the_flag_takes_becomes_a_timeout_ms(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, timeout_s: float, timeout_ms: int | None
) -> None:
    """--timeout inf raised OverflowError, and 1e9 the wire's bound on timeout_ms, each as a
    traceback (`int(timeout_s * 1000)`). The broker is left out: what is sent is seen."""
    sent: list[InferenceRequest] = []

    async def no_broker(self: InferenceClient, *exc: object) -> InferenceClient:
        return self

    async def seen(
        self: InferenceClient, request: WireRequest, *, timeout_s: float
    ) -> InferenceResult:
        sent.append(request.envelope)
        return InferenceResult(request_id=request.request_id, model="demo-mlp", status="ok")

    monkeypatch.setattr(InferenceClient, "__aenter__", no_broker)
    monkeypatch.setattr(InferenceClient, "__aexit__", no_broker)
    monkeypatch.setattr(InferenceClient, "infer", seen)
    await infer_once(
        "127.0.0.1:1", tmp_path, "demo-mlp", WIRE_X, tier="interactive", timeout_s=timeout_s
    )
    assert [request.timeout_ms for request in sent] == [timeout_ms]


@pytest.mark.parametrize(
    ("bootstrap", "model", "error", "message"),
    [
        pytest.param(
            "127.0.0.1:notaport",
            "demo-mlp",
            SettingsInvalid,
            r"^--bootstrap '127\.0\.0\.1:notaport' is not host:port",
            id="port-not-a-number",
        ),
        pytest.param(
            "127.0.0.1:1", "", InvalidInput, "model: String should have at least 1", id="no-name"
        ),
    ],
)
async def test_arguments_the_client_refuses_are_one_line_errors(
    tmp_path: Path, bootstrap: str, model: str, error: type[Exception], message: str
) -> None:
    """Each was a ValueError, a traceback: the root group only shortens inferbus errors
    (the model's name was refused only after connecting)."""
    with pytest.raises(error, match=message):
        await infer_once(bootstrap, tmp_path, model, WIRE_X, tier="interactive", timeout_s=1)


@pytest.mark.parametrize("folder", ["missing", "a-file"])
async def test_a_models_folder_that_is_not_there_is_named(tmp_path: Path, folder: str) -> None:
    """It said "model 'demo-mlp' is not in DIR (no models) ... or pass --models DIR" to
    someone who had passed --models DIR."""
    models = tmp_path / folder
    if folder == "a-file":
        models.write_text("")
    with pytest.raises(InvalidInput, match=r"there is no model repository at .* \(--models\)"):
        await infer_once(
            "127.0.0.1:1", models, "demo-mlp", {"x": [[1.0]]}, tier="interactive", timeout_s=1
        )
