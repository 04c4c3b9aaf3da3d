"""The throughput bench's output check: served answers against ONNX Runtime run directly."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from infra.models.repository import ModelRepository, ModelVersion
from services.bench.loadgen import EncoderEvents, encoder_inputs
from services.bench.outputs import TOLERANCE, Kept, check_failure, check_outputs
from services.bench.throughput import computes_outputs
from services.models.demo import write_demo_models
from services.runtime.result_wire import encode_result


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    write_demo_models(root)
    return ModelRepository(root).resolve("demo-encoder").model_file


def _direct(model_file: Path, inputs: dict[str, Any]) -> np.ndarray[Any, Any]:
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    out: np.ndarray[Any, Any] = session.run(["embedding"], inputs)[0]
    return out


def _served(request_id: str, embedding: np.ndarray[Any, Any], status: str = "ok") -> bytes:
    outputs = {"embedding": embedding} if status == "ok" else None
    return encode_result(
        request_id=request_id, model="demo-encoder", status=status, form="frame", outputs=outputs
    )


@pytest.mark.parametrize(
    ("change", "mismatched"),
    [
        pytest.param(lambda e: e, 0, id="same"),
        pytest.param(lambda e: e + 1e-6, 0, id="within-tolerance"),
        pytest.param(lambda e: e + 1e-3, 1, id="off"),
        pytest.param(lambda e: np.full_like(e, np.nan), 1, id="nan"),
        pytest.param(lambda e: e[:, :128], 1, id="wrong-shape"),
        pytest.param(None, 1, id="output-missing"),
    ],
)
def test_an_answer_is_right_only_when_it_is_what_onnx_runtime_computes(
    model_file: Path, change: Any, mismatched: int
) -> None:
    inputs = encoder_inputs(16, np.random.default_rng(3))
    if change is None:  # answered ok, but without the output
        result = encode_result(
            request_id="r1", model="demo-encoder", status="ok", form="frame", outputs={}
        )
    else:
        result = _served("r1", change(_direct(model_file, inputs)).astype(np.float32))

    check = check_outputs(
        model_file, ["embedding"], [Kept("r1", inputs, result)], tolerance=TOLERANCE
    )

    assert (check.checked, check.mismatched) == (1, mismatched)
    assert check.matched is (mismatched == 0)
    assert check.worst_request_id == "r1"
    assert ("MISMATCH" in check.line()) is bool(mismatched)


def test_an_error_answer_is_not_compared(model_file: Path) -> None:
    inputs = encoder_inputs(8, np.random.default_rng(4))
    kept = [Kept("r1", inputs, _served("r1", np.zeros((1, 256)), status="internal_error"))]

    check = check_outputs(model_file, ["embedding"], kept, tolerance=TOLERANCE)

    assert (check.checked, check.matched, check.max_abs_diff) == (0, False, None)
    assert "none checked" in check.line()


def test_the_events_keep_the_inputs_each_kept_request_was_sent_with() -> None:
    """The kept inputs are the ones in the event's bytes: a check of other inputs would
    pass or fail for nothing."""
    events = EncoderEvents("demo-encoder", encoding="b64", keep_every=2)
    sent = {f"{n:032x}": events(f"{n:032x}", 8) for n in range(6)}

    assert len(events.kept) == 3
    for request_id, inputs in events.kept.items():
        assert request_id.encode() in sent[request_id]
        ids = inputs["input_ids"]
        tensor = json.loads(sent[request_id])["inputs"]["input_ids"]
        decoded = np.frombuffer(base64.b64decode(tensor["b64"]), "<i8").reshape(tensor["shape"])
        assert np.array_equal(decoded, ids)


@pytest.mark.parametrize(
    ("engine", "kind", "checked"),
    [
        pytest.param("model", "onnxruntime", True, id="onnxruntime"),
        pytest.param("model", "tensorrt", True, id="tensorrt"),
        pytest.param("model", "sim", False, id="model-yaml-names-sim"),
        pytest.param("null", "onnxruntime", False, id="null-run"),
        pytest.param("sim", "onnxruntime", False, id="sim-run"),
    ],
)
def test_only_an_engine_that_computes_its_outputs_is_checked(
    engine: str, kind: str, checked: bool, model_file: Path
) -> None:
    """A model whose model.yaml names the simulated engine (sim-encoder) answers made-up
    outputs: compared with ONNX Runtime, every run would fail."""
    version = ModelRepository(model_file.parents[1].parent).resolve("demo-encoder")
    config = version.config.model_copy(
        update={"engine": version.config.engine.model_copy(update={"kind": kind})}
    )
    version = ModelVersion(version.name, version.version, version.directory, config)

    assert computes_outputs(engine, version) is checked


CHECK = {"checked": 40, "mismatched": 0, "max_abs_diff": 4e-8, "worst_request_id": "r-7"}


@pytest.mark.parametrize(
    ("report", "words"),
    [
        pytest.param(None, None, id="a-simulated-engine-has-nothing-to-check"),
        pytest.param(CHECK, None, id="every-answer-matched"),
        pytest.param({**CHECK, "mismatched": 2, "max_abs_diff": 0.5}, "2 of 40", id="mismatch"),
        pytest.param({**CHECK, "checked": 0}, "no answer was checked", id="nothing-checked"),
    ],
)
def test_a_run_fails_on_a_wrong_or_an_unchecked_answer(
    report: dict[str, Any] | None, words: str | None
) -> None:
    """A run whose kept requests all failed printed "none checked" and exited 0."""
    failure = check_failure(report)
    assert (failure is None) if words is None else (failure is not None and words in failure)
