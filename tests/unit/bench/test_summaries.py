"""What `bench throughput` and `bench buckets` print of their reports: every phase, even one
without an ok answer, and nothing the JSON contradicts."""

from __future__ import annotations

from typing import Any

from services.cli.bench import buckets_summary, throughput_summary

NO_PERCENTILES = {"p50": None, "p90": None, "p99": None}


def _phase(ok: int, *, failed: int = 0, sent: int | None = None) -> dict[str, Any]:
    answered = ok + failed
    e2e = {"p50": 40.0, "p90": 60.0, "p99": 80.0} if ok else NO_PERCENTILES
    return {
        "sent": answered if sent is None else sent,
        "answered": answered,
        "statuses": {k: v for k, v in (("ok", ok), ("error", failed)) if v},
        "samples_per_s": 100.0 if ok >= 10 else 0.0,
        "e2e_ms": e2e,
        "overhead_ms": e2e,
        "by_worker": {"worker-a": {"answered": ok, "e2e_ms": e2e}} if ok else {},
        "cpu": {"cpu_ms_per_request": {"broker": 0.1}, "machine_cores_busy": 1.9},
        "window": 256,
        "window_bound": None,
    }


def _throughput(
    saturation: dict[str, Any],
    half: dict[str, Any],
    *,
    engine: str = "model",
    ratio: float | None = 0.8,
    kind: str = "onnxruntime",
) -> dict[str, Any]:
    return {
        "engine": engine,
        "workers": 2,
        "raw_engine": {"samples_per_s": 125.0, "kind": kind},
        "saturation": saturation,
        "half_load": {"rate_rps": 50.0, **half},
        "ratio_e2e_over_raw": ratio,
    }


def test_a_run_that_answered_nothing_ok_prints_and_names_the_statuses() -> None:
    """It once ended in a TypeError formatting a p99 of None, after the whole run."""
    report = _throughput(_phase(0, failed=300), _phase(0, failed=150, sent=200))

    text = "\n".join(throughput_summary(report, open_loop=False))

    assert "saturation p99 e2e -" in text
    assert "not ok at saturation: {'error': 300}, 0 of 300 unanswered" in text
    assert "not ok at half load: {'error': 150}, 50 of 200 unanswered" in text


def test_a_clean_run_prints_the_ratio_and_no_failure_line() -> None:
    lines = throughput_summary(_throughput(_phase(300), _phase(500)), open_loop=True)

    assert lines[0].startswith("raw engine 125 samples/s | end to end 100 samples/s | ratio 0.80")
    assert "open loop (50 req/s)" in lines[0]
    assert not any(line.startswith("not ok") for line in lines)


def test_a_model_whose_own_engine_is_simulated_prints_no_ratio() -> None:
    """--engine model on a model.yaml that names the sim engine: the raw run is no ONNX
    Runtime, and the ratio is None (it once printed a ratio over the sim engine)."""
    report = _throughput(_phase(300), _phase(500), ratio=None, kind="sim")

    headline = throughput_summary(report, open_loop=False)[0]

    assert "no ratio: the raw run is no ONNX Runtime" in headline
    assert "one sim engine 125 samples/s" in headline


def _buckets(with_buckets: dict[str, Any], one_bucket: dict[str, Any]) -> dict[str, Any]:
    flat = one_bucket["samples_per_s"]
    return {
        "with_buckets": with_buckets,
        "one_bucket": one_bucket,
        "speedup": with_buckets["samples_per_s"] / flat if flat else None,
    }


def test_buckets_with_nothing_answered_with_buckets_blames_that_side() -> None:
    """A speedup of 0 once read as "one-bucket run answered nothing", the other side."""
    line, failure = buckets_summary(_buckets(_phase(0, failed=100), _phase(100)))

    assert "speedup 0.00x" in line
    assert failure is not None
    assert "with buckets ({'error': 100} of 100 sent)" in failure
    assert "one bucket" not in failure


def test_buckets_with_nothing_answered_on_one_bucket_fails_without_a_speedup() -> None:
    line, failure = buckets_summary(_buckets(_phase(100), _phase(5, sent=100)))

    assert line.endswith("speedup -")
    assert failure == "no steady rate: one bucket ({'ok': 5} of 100 sent)"


def test_buckets_that_both_answered_print_the_speedup() -> None:
    line, failure = buckets_summary(_buckets(_phase(100), _phase(100)))

    assert line == "with buckets 100 req/s | one bucket 100 req/s | speedup 1.00x"
    assert failure is None
