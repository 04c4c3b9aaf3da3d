"""Prometheus metrics on inferbus's own registry, and the `/metrics` server."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from tracing.health import HEALTH, Health

log = logging.getLogger(__name__)
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

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


class _StageSeconds(Collector):
    """`inferbus_stage_seconds`: a Prometheus histogram fed a whole batch at a time.

    prometheus_client's Histogram takes one observation per call under a lock; a batch of
    32 requests x 8 stages made that a visible share of the worker's CPU.
    """

    name = "inferbus_stage_seconds"
    documentation = (
        "Per-request stage latency (stages as in tracing.attributes.STAGES, and the "
        "per-request sums of SUMMED_STAGES: wait, engine)."
    )
    labels = ("model", "tier", "stage")

    def __init__(self, buckets_s: tuple[float, ...]) -> None:
        self._bounds = np.asarray(buckets_s, dtype=np.float64)
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str, str], tuple[np.ndarray[Any, Any], list[float]]] = {}

    def observe_many(self, model: str, tier: str, stage: str, seconds: Any) -> None:
        values = np.asarray(seconds, dtype=np.float64)
        values = values[np.isfinite(values)]
        if values.size == 0:
            return
        slots = np.searchsorted(self._bounds, values, side="left")
        counts = np.bincount(slots, minlength=len(self._bounds) + 1)
        with self._lock:
            series = self._series.get((model, tier, stage))
            if series is None:
                series = self._series[(model, tier, stage)] = (
                    np.zeros(len(self._bounds) + 1, dtype=np.int64),
                    [0.0],
                )
            series[0][:] += counts
            series[1][0] += float(values.sum())

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labels)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        with self._lock:
            snapshot = [(k, c.copy(), s[0]) for k, (c, s) in self._series.items()]
        for key, counts, total in sorted(snapshot):
            cumulative = np.cumsum(counts)
            buckets = [
                (repr(float(b)), float(n))
                for b, n in zip(self._bounds.tolist(), cumulative[:-1].tolist(), strict=True)
            ]
            buckets.append(("+Inf", float(cumulative[-1])))
            family.add_metric(list(key), buckets, total)
        yield family


STAGE_SECONDS = _StageSeconds(STAGE_BUCKETS_S)
REGISTRY.register(STAGE_SECONDS)
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
ARRIVAL_RPS = Gauge(
    "inferbus_arrival_rps",
    "Requests produced to a group's tier topic per second (end-offset delta, scaler window).",
    ("group",),
    registry=REGISTRY,
)
SERVICE_RPS = Gauge(
    "inferbus_service_rps",
    "Requests a group committed per second (committed-offset delta, scaler window).",
    ("group",),
    registry=REGISTRY,
)
OLDEST_AGE = Gauge(
    "inferbus_oldest_age_seconds",
    "Age of the oldest request a group has not committed yet.",
    ("group",),
    registry=REGISTRY,
)
GROUP_P99 = Gauge(
    "inferbus_group_p99_seconds",
    "The scaler's p99 per group over its window; part: queue (queue + batch wait), "
    "engine (preprocess + infer + postprocess) or e2e.",
    ("group", "part"),
    registry=REGISTRY,
)
SLO_P99_E2E = Gauge(
    "inferbus_slo_p99_e2e_seconds",
    "The group's tier objective for p99 end-to-end latency (model.yaml).",
    ("group",),
    registry=REGISTRY,
)
SCALE_DECISION_TIME = Gauge(
    "inferbus_scaler_decision_timestamp_seconds",
    "When the scaler last decided to scale a group up or down with this diagnosis (Unix s); "
    "one value per decision, so dashboards draw each as an annotation at its own time.",
    ("group", "direction", "diagnosis"),
    registry=REGISTRY,
)
SCALER_ACTING = Gauge(
    "inferbus_scaler_acting",
    "1 while this scaler holds the lease and acts, 0 while it waits as a standby (or runs "
    "as a dry run, which holds none).",
    registry=REGISTRY,
)
WORKER_VERSION = Gauge(
    "inferbus_worker_version_info",
    "1 for the model version this worker serves now (join on `instance` to label its "
    "requests and stage latencies with the version).",
    ("model", "lane", "version"),
    registry=REGISTRY,
)
ROLLOUT_SHARE = Gauge(
    "inferbus_rollout_share",
    "The canary's share of a model's requests in force (model.yaml, or a decision on "
    "inferbus.rollouts).",
    ("model", "canary"),
    registry=REGISTRY,
)
ROLLOUT_ERROR_RATE = Gauge(
    "inferbus_rollout_error_rate",
    "internal_error share of a version's results over the verdict window.",
    ("model", "lane", "version"),
    registry=REGISTRY,
)
ROLLOUT_P99 = Gauge(
    "inferbus_rollout_p99_seconds",
    "p99 end-to-end latency of a version's ok results over the verdict window.",
    ("model", "lane", "version"),
    registry=REGISTRY,
)
ROLLOUT_REQUESTS = Gauge(
    "inferbus_rollout_requests",
    "Results a version's workers sent over the verdict window.",
    ("model", "lane", "version"),
    registry=REGISTRY,
)
NOT_MEASURED = float("nan")
"""What a gauge shows for a value the scaler has not measured (graphs show a gap)."""


def count_request(service: str, model: str, tier: str, status: str, n: int = 1) -> None:
    """`n` terminal results with `status`."""
    REQUESTS.labels(service, model, tier, status).inc(n)


def observe_stage(model: str, tier: str, stage: str, values_ms: Any) -> None:
    """Stage latencies in ms (an array); the signature of a `StageBreakdown` observer."""
    STAGE_SECONDS.observe_many(model, tier, stage, np.asarray(values_ms, dtype=np.float64) / 1e3)


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


def _ms_to_s(ms: float | None) -> float:
    return NOT_MEASURED if ms is None else ms / 1000.0


def set_group_rates(group: str, arrival_rps: float | None, service_rps: float | None) -> None:
    """A group's arrival and service rates, requests per second (None: not measured)."""
    ARRIVAL_RPS.labels(group).set(NOT_MEASURED if arrival_rps is None else arrival_rps)
    SERVICE_RPS.labels(group).set(NOT_MEASURED if service_rps is None else service_rps)


def set_oldest_age(group: str, ms: float | None) -> None:
    """Age of a group's oldest uncommitted request, in ms (None: not measured)."""
    OLDEST_AGE.labels(group).set(_ms_to_s(ms))


def set_group_p99(group: str, part: str, ms: float | None) -> None:
    """The scaler's p99 of `part` (queue, engine, e2e) for a group, in ms."""
    GROUP_P99.labels(group, part).set(_ms_to_s(ms))


def set_slo(group: str, p99_e2e_ms: float) -> None:
    """The group's p99 end-to-end objective, in ms."""
    SLO_P99_E2E.labels(group).set(p99_e2e_ms / 1000.0)


def set_acting(acting: bool) -> None:
    """Whether this scaler acts now (it holds the lease, or runs with none)."""
    SCALER_ACTING.set(1 if acting else 0)


def mark_scale_decision(
    group: str, current: int, desired: int, diagnosis: str, at_s: float
) -> None:
    """A decision taken at `at_s` (Unix s); one that keeps the replicas is not marked."""
    if desired != current:
        direction = "up" if desired > current else "down"
        SCALE_DECISION_TIME.labels(group, direction, diagnosis).set(at_s)


_served: dict[tuple[str, str], str] = {}


def set_worker_version(model: str, lane: str, version: str) -> None:
    """This worker serves `version` now (the version it served before is dropped)."""
    before = _served.get((model, lane))
    if before is not None and before != version:
        WORKER_VERSION.remove(model, lane, before)
    _served[(model, lane)] = version
    WORKER_VERSION.labels(model, lane, version).set(1)


def set_rollout(
    model: str,
    canary: str,
    share: float,
    versions: dict[str, tuple[str, int, float | None, float | None]],
) -> None:
    """A rollout's share in force and, per lane, (version, results, error rate, p99 ms)."""
    ROLLOUT_SHARE.labels(model, canary).set(share)
    for lane, (version, requests, error_rate, p99_ms) in versions.items():
        ROLLOUT_REQUESTS.labels(model, lane, version).set(requests)
        ROLLOUT_ERROR_RATE.labels(model, lane, version).set(
            NOT_MEASURED if error_rate is None else error_rate
        )
        ROLLOUT_P99.labels(model, lane, version).set(_ms_to_s(p99_ms))


PATHS = ("/metrics", "/healthz", "/readyz")
"""What a metrics port serves; any other path is 404."""


def start_metrics_server(port: int, *, addr: str = "0.0.0.0") -> WSGIServer | None:
    """Serve `/metrics` from REGISTRY, and `/healthz` and `/readyz` from HEALTH, on `port` in
    a daemon thread; port 0 means off.

    Returns the server (call `.shutdown()` to stop) or None when off.
    """
    if port == 0:
        return None
    server = make_server(addr, port, metrics_app(), ThreadingWSGIServer, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    log.info("metrics.serving addr=%s port=%d paths=%s", addr, port, ",".join(PATHS))
    return server


def metrics_app(health: Health = HEALTH) -> WsgiApp:
    """The WSGI app behind the metrics port."""
    prometheus = make_wsgi_app(REGISTRY)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path in ("/healthz", "/readyz"):
            ok, why = health.live() if path == "/healthz" else health.ready()
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [f"{'ok' if ok else 'not ok'}: {why}\n".encode()]
        if path == "/metrics":
            return prometheus(environ, start_response)  # type: ignore[no-any-return]
        # A typo'd scrape or probe path must fail, not pass on the metrics page.
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [f"not found; this port serves {', '.join(PATHS)}\n".encode()]

    return app


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds must not fill the log."""
