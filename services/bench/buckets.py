"""`inferbus bench buckets`: a 90/10 mix of short and long requests, length buckets vs none."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from infra.models.config import ModelConfig
from services.bench.loadgen import EncoderEvents, LoadGenerator
from services.bench.throughput import Deployment, Progress, summarize, wait_until_serving
from services.models.demo import write_demo_models

FLAT = "demo-encoder-flat"
VARIANTS = {"demo-encoder": "with_buckets", FLAT: "one_bucket"}
"""Each served model and its key in the report."""


def write_flat_variant(root: Path) -> None:
    """A copy of demo-encoder that batches every length together (one bucket)."""
    source = root / "demo-encoder"
    target = root / FLAT
    shutil.copytree(source, target)
    config = ModelConfig.load(source / "model.yaml")
    batching = config.batching.model_copy(update={"length_buckets": []})
    flat = config.model_copy(update={"name": FLAT, "batching": batching})
    ModelConfig.model_validate(flat.model_dump()).dump(target / "model.yaml")


async def bench_buckets(
    *,
    requests: int,
    window: int,
    short_len: int,
    long_len: int,
    long_share: float,
    bootstrap: str | None,
    progress: Progress,
    ran: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Saturation throughput of the same mix with and without length buckets. `ran`, when
    given, gets each variant's figures as it ends (`with_buckets`, `one_bucket`), so that a
    run cut short (Ctrl-C) can still report what it measured."""
    ran = {} if ran is None else ran
    lengths_mix = {"short_len": short_len, "long_len": long_len, "long_share": long_share}
    ran.update(benchmark="buckets", mix=lengths_mix)
    root = Path(tempfile.mkdtemp(prefix="inferbus-bench-buckets-"))
    logs = Path(tempfile.mkdtemp(prefix="inferbus-bench-logs-"))
    try:
        write_demo_models(root)
        write_flat_variant(root)
        deployment = Deployment(bootstrap, root, ["demo-encoder", FLAT], logs)
        progress(
            f"starting {'the embedded broker, ' if bootstrap is None else ''}ingest and a "
            f"worker for each of demo-encoder and {FLAT} (logs: {logs})"
        )
        address = await deployment.start()
        results: dict[str, Any] = {}
        try:
            for model in ("demo-encoder", FLAT):
                gen = LoadGenerator(address, EncoderEvents(model))
                await gen.start()
                try:
                    await wait_until_serving(gen, deployment, progress)
                    mix = np.random.default_rng(11)

                    def lengths(mix: np.random.Generator = mix) -> int:
                        return long_len if mix.random() < long_share else short_len

                    def answered(done: int, model: str = model) -> None:
                        progress(f"{model}: answered {done}")

                    progress(f"{model}: warm-up")
                    await gen.closed_loop(200, window, lengths, lambda _: None)
                    progress(f"{model}: {requests} requests, {long_share:.0%} of {long_len} tokens")
                    report = await gen.closed_loop(requests, window, lengths, answered)
                    results[model] = summarize(report)
                    ran[VARIANTS[model]] = results[model]
                finally:
                    await gen.stop()
        finally:
            await deployment.stop()
        bucketed = results["demo-encoder"]["samples_per_s"]
        flat = results[FLAT]["samples_per_s"]
        return {
            "benchmark": "buckets",
            "mix": lengths_mix,
            "with_buckets": results["demo-encoder"],
            "one_bucket": results[FLAT],
            "speedup": bucketed / flat if flat else None,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
