"""One sampling decision per request, carried in `traceparent`, honoured downstream."""

from __future__ import annotations

import pytest

from tracing.sampling import new_trace, parse_traceparent, read_traceparent

VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    ("header", "sampled"),
    [
        pytest.param(VALID, True, id="sampled"),
        pytest.param(VALID[:-2] + "00", False, id="not-sampled"),
        pytest.param(VALID[:-2] + "03", True, id="other-flags-too"),
        pytest.param("01" + VALID[2:] + "-extra", True, id="future-version-extra-field"),
    ],
)
def test_valid_traceparents(header: str, sampled: bool) -> None:
    ref = parse_traceparent(header.encode())
    assert ref is not None
    assert ref.sampled is sampled
    assert ref.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert parse_traceparent(ref.header) == ref


@pytest.mark.parametrize(
    "header",
    [
        pytest.param("", id="empty"),
        pytest.param("garbage", id="garbage"),
        pytest.param(VALID + "-extra", id="v00-with-extra-field"),
        pytest.param("ff" + VALID[2:], id="version-ff"),
        pytest.param("00-" + "0" * 32 + "-b7ad6b7169203331-01", id="zero-trace-id"),
        pytest.param("00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01", id="zero-span-id"),
        pytest.param(VALID.replace("0a", "zz", 1), id="not-hex"),
    ],
)
def test_invalid_traceparents_start_a_new_trace(header: str) -> None:
    assert parse_traceparent(header) is None


def test_the_last_traceparent_header_wins() -> None:
    headers = [("traceparent", b"garbage"), ("x", b"1"), ("traceparent", VALID.encode())]
    ref = read_traceparent(headers)
    assert ref is not None and ref.sampled


@pytest.mark.parametrize(
    ("ratio", "low", "high"), [(0.0, 0, 0), (1.0, 4000, 4000), (0.25, 880, 1120)]
)
def test_new_traces_are_sampled_at_the_ratio(ratio: float, low: int, high: int) -> None:
    sampled = sum(new_trace(ratio).sampled for _ in range(4000))
    assert low <= sampled <= high
