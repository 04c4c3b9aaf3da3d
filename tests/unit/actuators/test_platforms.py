"""Kubernetes, compose and decision publishing, each against a fake."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from infra.processes import inferbus_command
from scaler.actuators.base import ActuatorError, dns_label, parse_group
from scaler.actuators.compose import ComposeActuator, count_containers, service_name
from scaler.actuators.decisions import publish_decision
from scaler.actuators.factory import choose_kind, make_actuator
from scaler.actuators.kubernetes import KubernetesActuator, deployment_name
from scaler.actuators.local import LocalActuator
from scaler.decision import GroupDecision, Reason
from scaler.settings import ScalerSettings
from scaler.signals import GroupSignals

GROUP = "inferbus.workers.demo_mlp.interactive"
CANARY = "inferbus.workers.demo_mlp.canary.interactive"


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        pytest.param(GROUP, ("demo_mlp", "interactive", "stable"), id="plain"),
        pytest.param(CANARY, ("demo_mlp", "interactive", "canary"), id="canary"),
    ],
)
def test_parse_group(group: str, expected: tuple[str, str, str]) -> None:
    assert parse_group(group) == expected


@pytest.mark.parametrize(
    "group",
    [
        pytest.param("inferbus.workers.a.b.batch", id="dots-in-model"),
        pytest.param("inferbus.workers.m.gold", id="unknown-tier"),
        pytest.param("inferbus.ingest", id="not-a-worker-group"),
    ],
)
def test_parse_group_refuses_other_names(group: str) -> None:
    with pytest.raises(ActuatorError, match="is not a worker group"):
        parse_group(group)


def test_names() -> None:
    assert deployment_name(GROUP) == "inferbus-worker-demo-mlp-interactive"
    assert service_name(GROUP) == "worker-demo-mlp-interactive"
    assert deployment_name(CANARY) == "inferbus-worker-demo-mlp-canary-interactive"
    assert service_name(CANARY) == "worker-demo-mlp-canary-interactive"
    assert len(dns_label("x" * 100)) == 63


class FakeAppsApi:
    """The two AppsV1Api methods the actuator uses."""

    def __init__(self, replicas: dict[str, int], fail: Exception | None = None) -> None:
        self.replicas = replicas
        self.patches: list[tuple[str, str, Any]] = []
        self.fail = fail

    def read_namespaced_deployment_scale(self, name: str, namespace: str) -> Any:
        if self.fail:
            raise self.fail
        return SimpleNamespace(spec=SimpleNamespace(replicas=self.replicas[name]))

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: Any) -> Any:
        if self.fail:
            raise self.fail
        self.patches.append((name, namespace, body))
        self.replicas[name] = body["spec"]["replicas"]
        return SimpleNamespace(spec=SimpleNamespace(replicas=self.replicas[name]))


async def test_kubernetes_reads_and_patches_scale() -> None:
    api = FakeAppsApi({"inferbus-worker-demo-mlp-interactive": 2})
    k8s = KubernetesActuator("prod", api=api)
    assert await k8s.current(GROUP) == 2
    await k8s.scale(GROUP, 5, "test")
    assert api.patches == [
        ("inferbus-worker-demo-mlp-interactive", "prod", {"spec": {"replicas": 5}})
    ]
    assert await k8s.current(GROUP) == 5
    await k8s.close()


async def test_kubernetes_api_error_is_an_actuator_error() -> None:
    denied = RuntimeError("forbidden")
    denied.status = 403  # type: ignore[attr-defined]
    k8s = KubernetesActuator("prod", api=FakeAppsApi({}, fail=denied))
    with pytest.raises(ActuatorError, match="forbidden") as info:
        await k8s.scale(GROUP, 1, "test")
    assert info.value.context["status"] == 403


def test_kubernetes_without_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_kubernetes(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "kubernetes" or name.startswith("kubernetes."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_kubernetes)
    with pytest.raises(ActuatorError, match=r"pip install -e '\.\[k8s\]'"):
        KubernetesActuator("prod")


class FakeRunner:
    def __init__(self, answers: list[tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    async def __call__(self, argv: Sequence[str]) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        return self.answers.pop(0)


async def test_compose_command_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERBUS_SCALER_COMPOSE_PROJECT_DIR", raising=False)
    runner = FakeRunner([(0, "", ""), (0, '{"Name":"a"}\n{"Name":"b"}\n', "")])
    compose = ComposeActuator(Path("/srv/docker-compose.yml"), project="ib", runner=runner)
    await compose.scale(GROUP, 3, "test")
    assert await compose.current(GROUP) == 2
    assert runner.calls == [
        [
            "docker", "compose", "-f", "/srv/docker-compose.yml", "-p", "ib",
            "up", "-d", "--no-recreate", "--no-deps",
            "--scale", "worker-demo-mlp-interactive=3", "worker-demo-mlp-interactive",
        ],
        [
            "docker", "compose", "-f", "/srv/docker-compose.yml", "-p", "ib",
            "ps", "--format", "json", "--status", "running", "worker-demo-mlp-interactive",
        ],
    ]  # fmt: skip


async def test_compose_commands_name_the_host_project_directory() -> None:
    """Regression: the scaler in its container ran `docker compose -f /deploy/...` alone, so
    a worker's relative bind mount `./models` named /deploy/models on the host."""
    runner = FakeRunner([(0, "", ""), (0, "", "")])
    compose = ComposeActuator(
        Path("/deploy/docker-compose.yml"),
        project="inferbus",
        project_dir=Path("/home/op/inferbus"),
        runner=runner,
    )
    await compose.scale(GROUP, 2, "test")
    await compose.current(GROUP)
    base = [
        "docker", "compose", "-f", "/deploy/docker-compose.yml", "-p", "inferbus",
        "--project-directory", "/home/op/inferbus",
    ]  # fmt: skip
    assert [call[: len(base)] for call in runner.calls] == [base, base]
    assert [call[len(base)] for call in runner.calls] == ["up", "ps"]


@pytest.mark.parametrize(
    ("value", "flag"),
    [
        pytest.param("/srv/inferbus", ["--project-directory", "/srv/inferbus"], id="set"),
        pytest.param("", [], id="blank-from-unset-pwd"),
        pytest.param(None, [], id="unset"),
    ],
)
def test_the_factory_takes_the_project_directory_from_the_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str | None, flag: list[str]
) -> None:
    """docker-compose.yml sets INFERBUS_SCALER_COMPOSE_PROJECT_DIR from ${PWD:-}: blank
    must not become the scaler's own working directory."""
    if value is None:
        monkeypatch.delenv("INFERBUS_SCALER_COMPOSE_PROJECT_DIR", raising=False)
    else:
        monkeypatch.setenv("INFERBUS_SCALER_COMPOSE_PROJECT_DIR", value)
    compose = make_actuator(
        "compose",
        bootstrap="b:1",
        models_dir=tmp_path,
        compose_file=Path("/deploy/docker-compose.yml"),
        compose_project="inferbus",
        compose_project_dir=ScalerSettings().compose_project_dir,
    )
    assert isinstance(compose, ComposeActuator)
    argv = compose.ps_argv(GROUP)
    assert argv[: argv.index("ps")] == [
        "docker", "compose", "-f", "/deploy/docker-compose.yml", "-p", "inferbus", *flag,
    ]  # fmt: skip


async def test_compose_failure_is_an_actuator_error() -> None:
    compose = ComposeActuator(Path("c.yml"), runner=FakeRunner([(1, "", "no such service")]))
    with pytest.raises(ActuatorError, match="no such service"):
        await compose.scale(GROUP, 1, "test")


@pytest.mark.parametrize(
    ("text", "count"),
    [
        pytest.param("", 0, id="empty"),
        pytest.param('[{"Name":"a"},{"Name":"b"}]', 2, id="json-array"),
        pytest.param('{"Name":"a"}\n', 1, id="json-lines"),
    ],
)
def test_count_containers(text: str, count: int) -> None:
    assert count_containers(text) == count


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    async def send_and_wait(self, topic: str, value: bytes, key: bytes) -> None:
        self.sent.append((topic, value, key))


async def test_publish_decision(caplog: pytest.LogCaptureFixture) -> None:
    decision = GroupDecision(
        group=GROUP,
        model="demo_mlp",
        tier="interactive",
        current=4,
        desired=6,
        diagnosis="capacity_bound",
        reasons=(Reason("queue", "queue p99 700 ms > budget 350 ms", {"queue_p99_ms": 700}),),
    )
    signals = GroupSignals(
        group=GROUP, model="demo_mlp", tier="interactive", replicas=4, ready_replicas=4,
        partitions=12, slo_p99_e2e_ms=500, collected_at=1.0,
    )  # fmt: skip
    producer = FakeProducer()
    caplog.set_level("INFO", logger="inferbus.scaler.decisions")
    await publish_decision(producer, decision, policy="slo", at=2.0, signals=signals)
    ((topic, value, key),) = producer.sent
    assert (topic, key) == ("inferbus.scaler.decisions", GROUP.encode())
    record = json.loads(value)
    assert (record["desired"], record["model"], record["policy"]) == (6, "demo_mlp", "slo")
    assert record["signals"]["partitions"] == 12
    assert record["reasons"][0]["code"] == "queue"
    assert caplog.messages == [decision.line()]


@pytest.mark.parametrize(
    ("applied", "error", "acting", "note"),
    [
        pytest.param(True, None, True, "", id="applied"),
        # An acting scaler's hold: the count was already the one wanted (stop 59: its log
        # said "not applied: dry run" on every hold).
        pytest.param(False, None, True, "", id="acting-hold"),
        pytest.param(False, None, False, " (not applied: dry run)", id="dry-run"),
        pytest.param(
            False,
            "ActuatorError('quota')",
            True,
            " (not applied: ActuatorError('quota'))",
            id="failed",
        ),
    ],
)
async def test_the_line_says_why_a_decision_was_not_applied(
    applied: bool, error: str | None, acting: bool, note: str, caplog: pytest.LogCaptureFixture
) -> None:
    decision = GroupDecision(
        group=GROUP, model="demo_mlp", tier="interactive", current=2, desired=2,
        diagnosis="steady",
    )  # fmt: skip
    caplog.set_level("INFO", logger="inferbus.scaler.decisions")
    await publish_decision(
        FakeProducer(), decision, policy="slo", at=2.0, applied=applied, error=error,
        acting=acting,
    )  # fmt: skip
    assert caplog.messages == [decision.line() + note]


@pytest.mark.parametrize(
    ("requested", "env", "kind"),
    [
        pytest.param("auto", {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "kubernetes", id="auto-pod"),
        pytest.param("auto", {}, "local", id="auto-elsewhere"),
        pytest.param("compose", {}, "compose", id="explicit"),
    ],
)
def test_choose_kind(requested: str, env: dict[str, str], kind: str) -> None:
    assert choose_kind(requested, env) == kind


def test_choose_kind_rejects_unknown() -> None:
    with pytest.raises(ActuatorError, match="unknown actuator"):
        choose_kind("nomad", {})


async def test_make_actuator(tmp_path: Path) -> None:
    local = make_actuator("local", bootstrap="b:1", models_dir=tmp_path)
    assert isinstance(local, LocalActuator)
    # This interpreter's `inferbus worker`, whether or not `inferbus` is on the PATH.
    worker = inferbus_command("worker")
    assert worker[0] == sys.executable
    assert worker[-3:] == ["-m", "services.cli.main", "worker"]
    assert local.argv("inferbus.workers.m.interactive")[: len(worker)] == worker
    await local.close()
    compose = make_actuator("compose", bootstrap="b:1", models_dir=tmp_path)
    assert isinstance(compose, ComposeActuator)
