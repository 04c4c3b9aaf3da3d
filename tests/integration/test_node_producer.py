"""A producer in another language, written from the README's wire format alone, gets its
answers: tests/interop/node/wire_probe.js (kafkajs) against a real broker and stack.

Skipped where Node.js or its kafkajs are missing: `npm ci --prefix tests/interop/node`
installs kafkajs (`make interop` does, then runs this test)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from services.models.demo import write_demo_models
from services.worker.settings import WorkerSettings
from tests.integration.stack import serving

PROBE = Path(__file__).resolve().parents[1] / "interop" / "node"
NODE = shutil.which("node")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(
        NODE is None or not (PROBE / "node_modules" / "kafkajs").is_dir(),
        reason="needs Node.js and kafkajs: npm ci --prefix tests/interop/node (make interop)",
    ),
]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bootstrap(broker: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    models = tmp_path_factory.mktemp("repo")
    write_demo_models(models)
    workers = [
        WorkerSettings(
            model="demo-mlp", tiers=["critical", "interactive", "batch"], models_dir=models
        ),
        WorkerSettings(model="demo-encoder", tiers=["critical"], models_dir=models),
    ]
    async with serving(broker, models, workers):
        yield broker


async def test_a_kafkajs_producer_gets_every_answer_it_expects(bootstrap: str) -> None:
    assert NODE is not None
    probe = await asyncio.create_subprocess_exec(
        NODE,
        str(PROBE / "wire_probe.js"),
        bootstrap,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(probe.communicate(), 120)
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert lines, err.decode()[-2000:]
    wrong = [line for line in lines if line["status"] != line["expect"]]
    assert not wrong, wrong
    assert probe.returncode == 0, err.decode()[-2000:]
    by_case = {line["case"]: line for line in lines}
    assert len(by_case) == 12
    # A frame is answered with a frame: 4 float32 outputs a sample, as raw bytes.
    assert by_case["frame"]["frame_payload_bytes"] == 16
    assert by_case["frame 2 samples"]["frame_payload_bytes"] == 32
    assert "shape [1, 15]" in by_case["wrong shape"]["message"]
