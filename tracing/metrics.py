"""Prometheus metrics on inferbus's own registry, and the `/metrics` server."""

from __future__ import annotations

import logging
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)
"""Only inferbus metrics: no process/platform collectors from the default registry."""

STAGE_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)

REQUESTS = Counter(
    "inferbus_requests",
    "Terminal results by status.",
    ("service", "model", "tier", "status"),
    registry=REGISTRY,
)
STAGE_SECONDS = Histogram(
    "inferbus_stage_seconds",
    "Per-request stage latency (stages as in tracing.attributes.STAGES).",
    ("model", "tier", "stage"),
    buckets=STAGE_BUCKETS_S,
    registry=REGISTRY,
)
BATCH_SIZE = Histogram(
    "inferbus_batch_size",
    "Requests per engine batch.",
    ("model", "tier"),
    buckets=BATCH_BUCKETS,
    registry=REGISTRY,
)
GROUP_LAG = Gauge(
    "inferbus_group_lag_messages",
    "Consumer-group lag: end offset minus committed offset, summed over partitions.",
    ("group",),
    registry=REGISTRY,
)
REPLICAS = Gauge(
    "inferbus_replicas",
    "Worker replicas per consumer group and instance state.",
    ("group", "state"),
    registry=REGISTRY,
)
DESIRED_REPLICAS = Gauge(
    "inferbus_replicas_desired",
    "Replicas the scaler's last decision asked for, per consumer group.",
    ("group",),
    registry=REGISTRY,
)


def count_request(service: str, model: str, tier: str, status: str) -> None:
    """One terminal result with `status`."""
    REQUESTS.labels(service, model, tier, status).inc()


def observe_stage(model: str, tier: str, stage: str, ms: float, count: int = 1) -> None:
    """Stage latency in ms, `count` times; the signature of a `StageBreakdown` observer."""
    child = STAGE_SECONDS.labels(model, tier, stage)
    for _ in range(count):
        child.observe(ms / 1000.0)


def observe_batch(model: str, tier: str, size: int) -> None:
    """One engine batch of `size` requests."""
    BATCH_SIZE.labels(model, tier).observe(size)


def set_group_lag(group: str, lag: int) -> None:
    """The latest lag of one consumer group, in messages."""
    GROUP_LAG.labels(group).set(lag)


def set_replicas(group: str, state: str, replicas: int) -> None:
    """How many of a group's instances are in `state` now."""
    REPLICAS.labels(group, state).set(replicas)


def set_desired_replicas(group: str, replicas: int) -> None:
    """The scaler's latest desired replica count for a group."""
    DESIRED_REPLICAS.labels(group).set(replicas)


def start_metrics_server(port: int, *, addr: str = "0.0.0.0") -> WSGIServer | None:
    """Serve `/metrics` from REGISTRY on `port` in a daemon thread; port 0 means off.

    Returns the server (call `.shutdown()` to stop) or None when off.
    """
    if port == 0:
        return None
    server: WSGIServer
    server, _thread = start_http_server(port, addr=addr, registry=REGISTRY)
    log.info("metrics.serving addr=%s port=%d", addr, port)
    return server
