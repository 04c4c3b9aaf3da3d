"""`inferbus bench throughput` sizes its workers like a CPU deployment should be sized."""

from __future__ import annotations

import pytest

from services.bench.throughput import default_workers, served_provider

CPU = "onnxruntime:CPUExecutionProvider"


@pytest.mark.parametrize(
    ("cores", "threads", "provider", "workers", "why"),
    [
        (2, 1, CPU, 2, "2 cores / 1 intra-op thread"),
        (16, 4, CPU, 4, "16 cores / 4 intra-op thread"),
        (2, 4, CPU, 1, "2 cores / 4 intra-op thread"),
        (2, 0, CPU, 1, "uses all cores"),
        (16, 1, "onnxruntime:CUDAExecutionProvider", 1, "not on the CPU"),
        (16, 1, "onnxruntime:TensorrtExecutionProvider", 1, "not on the CPU"),
        (2, 1, "sim:CPUExecutionProvider (simulated)", 1, "not on the CPU"),
        (2, 1, "null engine (simulated)", 1, "not on the CPU"),
    ],
)
def test_one_worker_per_engine_share_of_the_cores_on_a_cpu_engine(
    cores: int, threads: int, provider: str, workers: int, why: str
) -> None:
    got, reason = default_workers(cores, threads, provider)
    assert got == workers
    assert why in reason


@pytest.mark.parametrize(
    ("engine", "workers"),
    [("model", 2), ("null", 1), ("sim", 2)],
)
def test_a_sim_engine_is_served_as_the_cpu_engine_it_stands_for(engine: str, workers: int) -> None:
    got, _ = default_workers(2, 1, served_provider(engine, CPU))
    assert got == workers
