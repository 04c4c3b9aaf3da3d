"""Prometheus exposition: the documented names, on inferbus's own registry."""

from __future__ import annotations

import socket
import urllib.request

from prometheus_client import generate_latest

from tracing import metrics


def test_exposition_names() -> None:
    metrics.count_request("inferbus-worker", "m", "batch", "ok")
    metrics.observe_stage("m", "batch", "queue", [12.0, 12.0])
    metrics.observe_batch("m", "batch", 8)
    metrics.set_group_lag("inferbus.workers.m.batch", 42)
    metrics.set_replicas("inferbus.workers.m.batch", "ready", 3)
    metrics.set_desired_replicas("inferbus.workers.m.batch", 4)
    text = generate_latest(metrics.REGISTRY).decode()
    for line in [
        'inferbus_requests_total{model="m",service="inferbus-worker",status="ok",tier="batch"}',
        'inferbus_stage_seconds_bucket{le="0.025",model="m",stage="queue",tier="batch"} 2.0',
        'inferbus_batch_size_count{model="m",tier="batch"}',
        'inferbus_group_lag_messages{group="inferbus.workers.m.batch"} 42.0',
        'inferbus_replicas{group="inferbus.workers.m.batch",state="ready"} 3.0',
        'inferbus_replicas_desired{group="inferbus.workers.m.batch"} 4.0',
    ]:
        assert line in text
    assert "process_cpu" not in text


def test_metrics_server_port_zero_is_off_and_serves_otherwise() -> None:
    assert metrics.start_metrics_server(0) is None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    served = metrics.start_metrics_server(port, addr="127.0.0.1")
    assert served is not None
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        assert b"inferbus_requests_total" in body
    finally:
        served.shutdown()
        served.server_close()
