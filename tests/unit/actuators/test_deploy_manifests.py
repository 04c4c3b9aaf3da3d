"""What an operator would find broken on first apply, checked without a cluster or an engine:
env names and values the settings accept, commands the CLI parses, metrics ports and probe
paths the services serve, stop grace periods that cover the services' stop limits, and the
commands docs/deploy.md tells an operator to run.

A misspelt `INFERBUS_*` variable is silently ignored by pydantic-settings, and a metrics port
set under a wrong name leaves the probes knocking on a closed port: these are the checks
that catch them before a cluster does.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from pydantic_settings import BaseSettings

from infra.settings_reference import OUTSIDE_SETTINGS, SECTIONS, env_names
from scaler.actuators.compose import ComposeActuator
from scaler.run import STOP_LIMIT_S as SCALER_STOP_LIMIT_S
from scaler.settings import ScalerSettings
from services.cli.main import app
from services.ingest.app import STOP_LIMIT_S as INGEST_STOP_LIMIT_S
from services.ingest.settings import IngestSettings
from services.worker.settings import EXIT_S, WorkerSettings
from tests.unit.actuators.test_deploy import k8s_docs, role_grants
from tracing.metrics import PATHS

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "infra" / "k8s"
DEPLOY_MD = ROOT / "docs" / "deploy.md"

METRICS_SETTINGS: dict[str, type[IngestSettings | WorkerSettings | ScalerSettings]] = {
    "ingest": IngestSettings,
    "worker": WorkerSettings,
    "scaler": ScalerSettings,
}
"""The settings class whose `metrics_port` a service role (its first CLI word) serves on."""

FIELD_REF = "from-a-field-ref"
"""Stands in for an env value Kubernetes fills in (`valueFrom.fieldRef`)."""


@dataclass(frozen=True)
class Container:
    """One inferbus container of a manifest or compose service, as the process sees it."""

    where: str
    argv: list[str]
    env: dict[str, str]
    spec: dict[str, Any]
    """The k8s container or the compose service."""
    grace_s: float
    """How long the platform waits after SIGTERM before SIGKILL."""

    @property
    def role(self) -> str:
        return self.argv[0]


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def _interpolated(value: object) -> str:
    """A compose value as compose reads it with every `${VAR:-default}` unset."""
    text = str(value)
    while "${" in text:
        text, count = re.subn(r"\$\{[A-Za-z_][A-Za-z0-9_]*:-([^${}]*)\}", r"\1", text)
        assert count, f"unsupported interpolation in {value!r}"
    return text


def _duration_s(text: str) -> float:
    """A compose duration (`40s`, `1m30s`) in seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a duration: {text!r}"
    return sum(float(number) * units[unit] for number, unit in parts)


def k8s_containers() -> list[Container]:
    docs = k8s_docs()
    configmaps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    found = []
    for doc in docs:
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        pod = doc["spec"]["template"]["spec"]
        for container in pod["containers"]:
            env: dict[str, str] = {}
            for source in container.get("envFrom", []):
                env.update(configmaps[source["configMapRef"]["name"]])
            for item in container.get("env", []):
                env[item["name"]] = item.get("value", FIELD_REF)
            found.append(
                Container(
                    where=f"{doc['kind']}/{doc['metadata']['name']}",
                    argv=[*container.get("command", []), *container.get("args", [])],
                    env=env,
                    spec=container,
                    grace_s=float(pod.get("terminationGracePeriodSeconds", 30)),
                )
            )
    return found


def compose_containers() -> list[Container]:
    return [
        Container(
            where=f"compose/{name}",
            argv=list(service["command"]),
            env={k: _interpolated(v) for k, v in (service.get("environment") or {}).items()},
            spec=service,
            grace_s=_duration_s(service.get("stop_grace_period", "10s")),
        )
        for name, service in _compose()["services"].items()
        if str(service.get("image", "")).startswith("inferbus")
    ]


CONTAINERS = k8s_containers() + compose_containers()
SERVING = [c for c in CONTAINERS if c.role in METRICS_SETTINGS]


def _ids(containers: list[Container]) -> list[str]:
    return [c.where for c in containers]


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """An environment without this shell's INFERBUS_* variables, to set a container's in."""
    for name in [n for n in os.environ if n.startswith("INFERBUS_")]:
        monkeypatch.delenv(name)
    yield monkeypatch


def _settings(cls: type[BaseSettings], env: Mapping[str, str], mp: pytest.MonkeyPatch) -> Any:
    for name, value in env.items():
        mp.setenv(name, value)
    return cls()


# --- environment variables -------------------------------------------------------------


def known_variables() -> set[str]:
    """Every variable inferbus reads: the settings classes' and the few read outside them."""
    known = {
        variable
        for section in SECTIONS
        for name, field in section.settings.model_fields.items()
        for variable in env_names(section.settings, name, field)
    }
    return known | {name for name, _default, _what in OUTSIDE_SETTINGS}


DEPLOY_FILES = [
    *sorted(p.relative_to(ROOT).as_posix() for p in K8S.glob("*.yaml")),
    "docker-compose.yml",
    "docs/deploy.md",
]


@pytest.mark.parametrize("path", DEPLOY_FILES)
def test_every_inferbus_variable_named_is_one_the_settings_read(path: str) -> None:
    """Values, comments and prose alike: a name the settings do not read is ignored in silence
    where it is set, and sends an operator to set nothing where it is written."""
    named = set(re.findall(r"\bINFERBUS_[A-Z0-9]+(?:_[A-Z0-9]+)*\b", (ROOT / path).read_text()))
    assert named - known_variables() == set()


@pytest.mark.parametrize("container", CONTAINERS, ids=_ids(CONTAINERS))
def test_the_settings_accept_every_container_environment(
    container: Container, environment: pytest.MonkeyPatch
) -> None:
    for section in SECTIONS:
        _settings(section.settings, container.env, environment)


# --- commands --------------------------------------------------------------------------

CLI = typer.main.get_command(app)


def parse(argv: list[str]) -> Any:
    """The command line as `inferbus` would parse it (options, types, extra arguments),
    without running the command; a click error says what is wrong."""
    command: Any = CLI
    path = ["inferbus"]
    rest = list(argv)
    while hasattr(command, "commands"):
        assert rest and rest[0] in command.commands, f"no command {' '.join([*path, *rest[:1]])}"
        path.append(rest[0])
        command = command.commands[rest.pop(0)]
    return command.make_context(" ".join(path), rest)


def docs_inferbus_commands() -> list[str]:
    """Every `inferbus ...` command line docs/deploy.md shows, inline or in a code block."""
    text = DEPLOY_MD.read_text()
    spans = re.findall(r"`(inferbus [^`]+)`", text)
    blocks = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.M | re.S))
    lines = [line.strip() for line in blocks.splitlines() if line.strip().startswith("inferbus ")]
    return sorted(set(spans + lines))


@pytest.mark.parametrize("container", CONTAINERS, ids=_ids(CONTAINERS))
def test_every_container_command_parses(
    container: Container, environment: pytest.MonkeyPatch
) -> None:
    for name, value in container.env.items():
        environment.setenv(name, value)
    parse(container.argv)


@pytest.mark.parametrize("line", docs_inferbus_commands())
def test_every_inferbus_command_in_the_deploy_docs_parses(
    line: str, environment: pytest.MonkeyPatch
) -> None:
    argv = shlex.split(line)
    assert argv[0] == "inferbus"
    parse(argv[1:])


@pytest.mark.parametrize(
    "container", [c for c in CONTAINERS if c.role == "scaler"], ids=lambda c: c.where
)
def test_the_scaler_flag_and_env_name_one_actuator(
    container: Container, environment: pytest.MonkeyPatch
) -> None:
    flag = container.argv[container.argv.index("--actuator") + 1]
    settings = _settings(ScalerSettings, container.env, environment)
    assert settings.actuator == flag


# --- ports, probes, grace periods ------------------------------------------------------


def _metrics_port(container: Container, mp: pytest.MonkeyPatch) -> int:
    port: int = _settings(METRICS_SETTINGS[container.role], container.env, mp).metrics_port
    assert port > 0, f"{container.where}: no metrics port, so no /healthz or /readyz either"
    return port


K8S_SERVING = [c for c in SERVING if not c.where.startswith("compose/")]
COMPOSE_SERVING = [c for c in SERVING if c.where.startswith("compose/")]


@pytest.mark.parametrize("container", K8S_SERVING, ids=_ids(K8S_SERVING))
def test_k8s_ports_probes_and_scrape_agree_with_the_settings(
    container: Container, environment: pytest.MonkeyPatch
) -> None:
    port = _metrics_port(container, environment)
    named = {p["name"]: p["containerPort"] for p in container.spec["ports"]}
    assert named["metrics"] == port
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        if kind in container.spec:
            probe = container.spec[kind]["httpGet"]
            assert named.get(probe["port"], probe["port"]) == port, kind
            assert probe["path"] in PATHS, kind
    pod = next(
        d["spec"]["template"]
        for d in k8s_docs()
        if f"{d['kind']}/{d['metadata']['name']}" == container.where
    )
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(port)


def test_k8s_services_target_a_port_their_pods_name() -> None:
    docs = k8s_docs()
    pods = [d["spec"]["template"] for d in docs if d["kind"] == "Deployment"]
    services = [d for d in docs if d["kind"] == "Service"]
    assert services
    for service in services:
        selector = service["spec"]["selector"].items()
        matched = [p for p in pods if selector <= p["metadata"]["labels"].items()]
        assert matched, f"{service['metadata']['name']} selects no pod"
        for port in service["spec"]["ports"]:
            for pod in matched:
                named = {
                    p["name"]: p["containerPort"]
                    for c in pod["spec"]["containers"]
                    for p in c.get("ports", [])
                }
                assert named[port["targetPort"]] == port["port"], service["metadata"]["name"]


@pytest.mark.parametrize("container", COMPOSE_SERVING, ids=_ids(COMPOSE_SERVING))
def test_compose_healthchecks_and_scrapes_agree_with_the_settings(
    container: Container, environment: pytest.MonkeyPatch
) -> None:
    port = _metrics_port(container, environment)
    service = container.where.removeprefix("compose/")
    if "healthcheck" in container.spec:
        (url,) = re.findall(r"https?://[^'\" ]+", " ".join(container.spec["healthcheck"]["test"]))
        found = re.fullmatch(r"http://127\.0\.0\.1:(\d+)(/\S*)", url)
        assert found, url
        assert (int(found[1]), found[2]) == (port, "/readyz")
    if "expose" in container.spec:
        assert str(port) in container.spec["expose"]
    scrapes = yaml.safe_load((ROOT / "infra" / "prometheus" / "prometheus.yml").read_text())
    ports = {
        sd["port"]
        for job in scrapes["scrape_configs"]
        for sd in job.get("dns_sd_configs", [])
        if service in sd["names"]
    }
    assert ports == {port}


def _stop_limit_s(container: Container, mp: pytest.MonkeyPatch) -> float:
    if container.role == "worker":
        limit: float = _settings(WorkerSettings, container.env, mp).stop_limit_s
        return limit
    return {"ingest": INGEST_STOP_LIMIT_S, "scaler": SCALER_STOP_LIMIT_S}[container.role]


@pytest.mark.parametrize("container", SERVING, ids=_ids(SERVING))
def test_the_grace_period_outlasts_the_stop_limit(
    container: Container, environment: pytest.MonkeyPatch
) -> None:
    """Regression: compose's workers had 40 s for a stop that may take 42 (2 s notice + 30 s
    drain + 10 s on the broker), ingest and the scaler Docker's default 10 s for one of 10:
    SIGKILL cut the last commit and the `gone` notice whenever a stop used its limit."""
    limit_s = _stop_limit_s(container, environment)
    # EXIT_S: the process's exit after its stop limit (the worker's; ingest's and the
    # scaler's are alike).
    assert container.grace_s >= limit_s + EXIT_S


# --- names across the artefacts --------------------------------------------------------


def test_the_compose_scaler_scales_its_own_project() -> None:
    compose = _compose()
    scaler = compose["services"]["scaler"]
    env = scaler["environment"]
    assert env["INFERBUS_SCALER_COMPOSE_PROJECT"] == compose["name"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in scaler["volumes"]}
    assert mounts[env["INFERBUS_SCALER_COMPOSE_FILE"]] == "./docker-compose.yml"
    assert mounts["/var/run/docker.sock"] == "/var/run/docker.sock"


def test_k8s_pods_name_configmaps_and_accounts_that_exist() -> None:
    docs = k8s_docs()
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for doc in docs:
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        pod = doc["spec"]["template"]["spec"]
        if "serviceAccountName" in pod:
            assert ("ServiceAccount", pod["serviceAccountName"]) in names
        for volume in pod.get("volumes", []):
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in names
        for container in pod["containers"]:
            for source in container.get("envFrom", []):
                assert ("ConfigMap", source["configMapRef"]["name"]) in names


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl here")
def test_kustomize_builds_the_manifests() -> None:
    built = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=60, check=False
    )
    assert built.returncode == 0, built.stderr
    objects = [d for d in yaml.safe_load_all(built.stdout) if d]
    assert len(objects) == len(k8s_docs())
    assert all(
        d["metadata"].get("namespace") == "inferbus" for d in objects if d["kind"] != "Namespace"
    )


# --- docs/deploy.md as an operator reads it --------------------------------------------


def _role_grants() -> set[tuple[str, str, str]]:
    return role_grants(next(d for d in k8s_docs() if d["kind"] == "Role"))


def _options_and_arguments(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """`--name=value` and `-n value` options by name (dashes off), and the positionals."""
    options: dict[str, str] = {}
    positional: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        if not token.startswith("-"):
            positional.append(token)
            continue
        name, has_value, value = token.lstrip("-").partition("=")
        options[name] = value if has_value else next(tokens)
    return options, positional


VERBS = {"read": "get", "list": "list", "patch": "patch", "replace": "update", "create": "create"}
"""The RBAC verb of each kind of AppsV1Api method (`read_namespaced_deployment_scale`)."""


def test_the_role_grants_exactly_what_the_kubernetes_actuator_calls() -> None:
    """Read from the actuator's source, so a new API call cannot ship without its grant."""
    source = (ROOT / "scaler" / "actuators" / "kubernetes.py").read_text()
    calls = set(re.findall(r"self\._api\.(\w+)\(", source))
    assert calls
    needed = set()
    for call in calls:
        action, _, target = call.partition("_namespaced_")
        kind, _, subresource = target.partition("_")
        needed.add(("apps", "/".join(filter(None, [f"{kind}s", subresource])), VERBS[action]))
    assert _role_grants() == needed


def docs_can_i_commands() -> list[str]:
    return re.findall(r"`(kubectl auth can-i [^`]+)`", DEPLOY_MD.read_text())


@pytest.mark.parametrize("line", docs_can_i_commands())
def test_the_documented_rbac_check_asks_what_the_role_grants(line: str) -> None:
    """Regression: `kubectl auth can-i patch deployments/scale` asks about a Deployment
    *named* scale (TYPE/NAME), which the Role does not grant: the documented check said no
    on a correct install. The subresource goes in `--subresource`."""
    options, (verb, resource) = _options_and_arguments(shlex.split(line)[3:])
    kind, _, name = resource.partition("/")
    plural, _, group = kind.partition(".")
    asked = (group or "apps", "/".join(filter(None, [plural, options.get("subresource")])), verb)
    assert not name, f"{resource!r} asks about an object named {name!r}"
    assert asked in _role_grants()
    assert options.get("as") == "system:serviceaccount:inferbus:inferbus-scaler"


def test_the_deploy_docs_show_the_compose_actuators_commands() -> None:
    actuator = ComposeActuator(Path("f.yml"), service_for=lambda _group: "<service>")
    group = "inferbus.workers.m.interactive"
    text = DEPLOY_MD.read_text()
    for argv in (actuator.ps_argv(group), actuator.scale_argv(group, 7)):
        shown = " ".join(a for a in argv if a not in ("-f", "f.yml")).replace("=7", "=N")
        assert f"`{shown}`" in text


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as dashes."""
    return {
        re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in path.read_text().splitlines()
        if line.startswith("#")
    }


def test_deploy_docs_links_reach_a_heading() -> None:
    links = re.findall(r"\]\(([\w-]+\.md)?(?:#([\w-]+))?\)", DEPLOY_MD.read_text())
    assert links
    for file, anchor in links:
        target = DEPLOY_MD.parent / (file or DEPLOY_MD.name)
        assert target.exists(), file
        assert not anchor or anchor in _anchors(target), f"{file}#{anchor}"


def test_deploy_docs_list_every_manifest() -> None:
    text = DEPLOY_MD.read_text()
    table = text.split("`infra/k8s/`:", 1)[1].split("\n\n", 2)[1]
    first_column = [row.split("|")[1] for row in table.splitlines()]
    listed = set(re.findall(r"`([\w-]+\.yaml)`", " ".join(first_column)))
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}


def test_deploy_docs_name_files_that_exist() -> None:
    top = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    named = {
        path.rstrip("/")
        for path in re.findall(r"`([\w.-]+/[\w./-]*)`", DEPLOY_MD.read_text())
        if path.split("/")[0] in top
    }
    assert named
    assert [p for p in sorted(named) if not (ROOT / p).exists()] == []
