"""Traffic families: seeded, in the trace's CSV form, and shaped as their names say."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scaler.sim.traffic import DURATION_S, FAMILIES, generate, write_csv
from scaler.sim.workload import WorkloadError, from_trace, read_trace


def _rate(times: np.ndarray, start: float, end: float) -> float:
    return float(np.count_nonzero((times >= start) & (times < end))) / (end - start)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_seeded_and_trace_like(family: str) -> None:
    a, b, other = generate(family, 5), generate(family, 5), generate(family, 6)
    np.testing.assert_array_equal(a.times, b.times)
    assert a.times.size != other.times.size or not np.array_equal(a.times, other.times)
    assert np.all(np.diff(a.times) >= 0) and a.times[0] >= 0 and a.times[-1] < DURATION_S
    # The conversation trace's scale: a few requests per second on average.
    assert 2.0 < a.times.size / DURATION_S < 10.0


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_csv_round_trip(tmp_path: Path, family: str) -> None:
    traffic = generate(family, 1)
    path = tmp_path / f"{family}.csv"
    write_csv(traffic, path)
    assert path.read_text().splitlines()[0] == "TIMESTAMP,ContextTokens,GeneratedTokens"
    times, tokens = read_trace(path)
    np.testing.assert_allclose(times, traffic.times - traffic.times[0], atol=1e-5)
    np.testing.assert_array_equal(tokens, traffic.context_tokens)
    w = from_trace(path, rate_scale=20, tiers=["interactive"], max_input_tokens=512, seed=1)
    assert w.total() == pytest.approx(20 * traffic.times.size, rel=0.02)


def test_on_off_has_idle_gaps_and_short_bursts() -> None:
    t = generate("on-off", 1).times
    per_s = np.histogram(t, bins=np.arange(0, DURATION_S + 1))[0]
    idle = per_s <= 1
    assert 0.3 < idle.mean() < 0.8
    runs = np.diff(np.flatnonzero(np.diff(np.concatenate(([1], idle.astype(int), [1])))))
    assert max(runs) < 200  # no burst or gap of the generator is longer than 300 s


def test_flash_crowd_jumps_fourfold_within_20s() -> None:
    t = generate("flash-crowd", 1).times
    per_10s = np.histogram(t, bins=np.arange(0, DURATION_S + 1, 10))[0].astype(float)
    smooth = np.convolve(per_10s, np.ones(3) / 3, mode="same")
    assert smooth.max() > 3.0 * np.median(smooth)
    held = np.count_nonzero(smooth > 3.0 * np.median(smooth)) * 10
    assert 2 * 240 <= held <= 2 * 420  # two crowds, each ~5 min near 4x


def test_sawtooth_ramps_to_three_times() -> None:
    t = generate("sawtooth", 1).times
    per_15s = np.histogram(t, bins=np.arange(0, DURATION_S + 1, 15))[0] / 15
    assert np.percentile(per_15s, 95) > 2.2 * np.percentile(per_15s, 10)


def test_diurnal_peaks_and_troughs() -> None:
    t = generate("diurnal", 1).times
    night, morning = _rate(t, 0, 450), _rate(t, 1500, 1800)
    assert morning > 2.5 * night


def test_long_context_share_shifts() -> None:
    traffic = generate("long-context", 2)
    long = (traffic.context_tokens > 512).astype(float)
    bins = np.arange(0, DURATION_S + 1, 300)
    share = (
        np.histogram(traffic.times, bins, weights=long)[0] / np.histogram(traffic.times, bins)[0]
    )
    assert share.max() - share.min() > 0.3


def test_unknown_family() -> None:
    with pytest.raises(WorkloadError, match="unknown family"):
        generate("square-wave", 1)
