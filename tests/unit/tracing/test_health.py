"""`/healthz` says the event loop runs; `/readyz` says the service serves."""

from __future__ import annotations

from typing import Any

import pytest

from tracing.health import Health
from tracing.metrics import metrics_app


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def get(health: Health, path: str) -> tuple[str, str]:
    seen: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        seen["status"] = status

    body = b"".join(
        metrics_app(health)({"PATH_INFO": path, "REQUEST_METHOD": "GET"}, start_response)
    )
    return seen["status"], body.decode()


@pytest.mark.parametrize(
    ("beat_ago_s", "readiness", "live", "ready"),
    [
        pytest.param(None, (True, "ready"), "200 OK", "200 OK", id="before-the-first-beat"),
        pytest.param(1.0, (True, "ready"), "200 OK", "200 OK", id="serving"),
        pytest.param(1.0, (False, "state draining"), "200 OK", "503", id="draining"),
        pytest.param(45.0, (True, "ready"), "503", "503", id="stalled-loop"),
    ],
)
def test_probes(
    beat_ago_s: float | None, readiness: tuple[bool, str], live: str, ready: str
) -> None:
    clock = Clock()
    health = Health(stall_after_s=30.0, clock=clock)
    if beat_ago_s is not None:
        health.beat()
        clock.now += beat_ago_s
    health.serve_readiness(lambda: readiness)
    assert get(health, "/healthz")[0].startswith(live)
    status, body = get(health, "/readyz")
    assert status.startswith(ready)
    if not ready.startswith("200"):
        assert "not ok" in body


def test_a_readiness_check_that_raises_is_not_ready_and_says_why() -> None:
    health = Health()

    def broken() -> tuple[bool, str]:
        raise RuntimeError("boom")

    health.serve_readiness(broken)
    ready, why = health.ready()
    assert not ready and "boom" in why


def test_metrics_are_still_served() -> None:
    status, body = get(Health(), "/metrics")
    assert status.startswith("200") and "inferbus_requests" in body


@pytest.mark.parametrize(
    ("path", "status"),
    [
        pytest.param("/metrics", "200", id="metrics"),
        pytest.param("/healthz", "200", id="healthz"),
        pytest.param("/readyz", "503", id="readyz-starting"),
        pytest.param("/nosuch", "404", id="unknown"),
        pytest.param("/", "404", id="root"),
        pytest.param("/metrics/x", "404", id="below-metrics"),
        pytest.param("/readyz/", "404", id="trailing-slash"),
    ],
)
def test_only_the_documented_paths_are_served(path: str, status: str) -> None:
    """Regression: any path answered the metrics with 200, so a probe or scrape of a
    mistyped path passed."""
    got, body = get(Health(), path)
    assert got.startswith(status), (got, body)
    if status == "404":
        assert "inferbus_requests" not in body and "/metrics, /healthz, /readyz" in body
