"""A result the wire cannot carry is answered `internal_error`, never left unanswered."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import orjson
import pytest

from services.worker.execution import RequestOutcome
from tests.unit.worker.test_expiry import BusyHost, stalled_pipeline, waiting


def outcome(outputs: dict[str, np.ndarray]) -> RequestOutcome:
    return RequestOutcome(
        outputs=outputs, error=None, batch_size=2, infer_ms=1.0, assemble_ms=0.1, split_ms=0.1
    )


@pytest.mark.parametrize(
    ("outputs", "status"),
    [
        pytest.param({"y": np.ones((1, 4), np.float32)}, "ok", id="carried"),
        pytest.param({"y": np.ones((1, 4), np.complex64)}, "internal_error", id="not-carried"),
    ],
)
async def test_every_request_of_a_batch_is_answered(
    outputs: dict[str, np.ndarray], status: str
) -> None:
    pipeline, _, capture, _ = stalled_pipeline(BusyHost())
    good, other = waiting(1, 30.0), waiting(2, 30.0)
    ran = SimpleNamespace(
        outcomes=[outcome(outputs), outcome({"y": np.zeros((1, 4), np.float32)})],
        engine=SimpleNamespace(info=SimpleNamespace(provider="CPU", simulated=False)),
        version=SimpleNamespace(version="1"),
    )

    await pipeline.answer([good, other], ran)  # type: ignore[arg-type]

    results = {r["request_id"]: r for r in (orjson.loads(o.value) for o in capture.sent)}
    assert set(results) == {"r1", "r2"}
    assert results["r1"]["status"] == status
    assert results["r2"]["status"] == "ok"
    if status != "ok":
        assert "could not encode" in results["r1"]["error"]["message"]
