"""The deploy files parse, and agree with the actuators' naming and the services' settings.

`docker compose config` and `kubectl apply --dry-run` need an engine or a cluster; these
checks catch the mistakes that reach one anyway (names, ports, env, RBAC).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.models.config import ModelConfig
from infra.models.repository import ModelRepository
from infra.settings import KafkaSettings
from scaler.actuators.compose import service_name
from scaler.actuators.kubernetes import deployment_name
from schemas.topics import TIERS, worker_group
from services.models.demo import write_demo_models
from tracing.metrics import REGISTRY

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "infra" / "k8s"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def k8s_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def arg_after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def group_of(args: list[str]) -> str:
    """The worker group a `worker --model M --tier T` command line joins."""
    tier = arg_after(args, "--tier")
    assert tier in TIERS
    return worker_group(arg_after(args, "--model"), tier)


def test_compose_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"kafka", "topics", "jaeger", "prometheus", "grafana", "ingest", "scaler"} <= set(
        services
    )
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert "controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]
    assert services["jaeger"]["image"].startswith("jaegertracing/jaeger:2.")
    assert {"127.0.0.1:4317:4317", "127.0.0.1:4318:4318", "127.0.0.1:16686:16686"} <= set(
        services["jaeger"]["ports"]
    )
    assert services["topics"]["command"][:4] == ["topics", "create", "--bootstrap", "kafka:9092"]
    assert services["ingest"]["environment"]["INFERBUS_INGEST_METRICS_PORT"] == "9101"
    assert services["scaler"]["environment"]["INFERBUS_SCALER_ACTUATOR"] == "compose"
    for name in ("ingest", "scaler"):
        env = services[name]["environment"]
        assert env["INFERBUS_KAFKA_BOOTSTRAP"] == "kafka:9092"
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4317"


def test_compose_workers_match_the_actuator(compose: dict[str, Any]) -> None:
    workers = {k: v for k, v in compose["services"].items() if k.startswith("worker-")}
    assert workers
    for name, service in workers.items():
        group = group_of(service["command"])
        assert service_name(group) == name
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia"
        assert "gpu" in device["capabilities"]
        assert service["environment"]["INFERBUS_WORKER_METRICS_PORT"] == "9100"
        assert "container_name" not in service, "a scaled service cannot have a fixed name"
        assert "ports" not in service, "replicas cannot share a host port"


def test_prometheus_scrapes_the_compose_services(compose: dict[str, Any]) -> None:
    mount = next(v for v in compose["services"]["prometheus"]["volumes"] if "prometheus.yml" in v)
    config = yaml.safe_load((ROOT / mount.split(":")[0]).read_text())
    scraped = {
        (name, sd["port"])
        for job in config["scrape_configs"]
        for sd in job.get("dns_sd_configs", [])
        for name in sd["names"]
    }
    workers = {(k, 9100) for k in compose["services"] if k.startswith("worker-")}
    assert {("ingest", 9101), ("scaler", 9102), *workers} <= scraped
    k8s = yaml.safe_load((ROOT / "infra/prometheus/prometheus-k8s.yml").read_text())
    assert k8s["scrape_configs"][0]["kubernetes_sd_configs"][0]["role"] == "pod"


KNOWN_KINDS = {
    "Namespace": "v1",
    "ConfigMap": "v1",
    "Service": "v1",
    "ServiceAccount": "v1",
    "Deployment": "apps/v1",
    "Job": "batch/v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
}


@pytest.mark.parametrize("doc", k8s_docs(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_k8s_document(doc: dict[str, Any]) -> None:
    assert KNOWN_KINDS[doc["kind"]] == doc["apiVersion"]
    if doc["kind"] != "Namespace":
        assert doc["metadata"]["namespace"] == "inferbus"
    if doc["kind"] == "Deployment":
        spec = doc["spec"]
        assert (
            spec["selector"]["matchLabels"].items()
            <= spec["template"]["metadata"]["labels"].items()
        )


def test_k8s_rbac_covers_deployments_scale() -> None:
    docs = k8s_docs()
    role = next(d for d in docs if d["kind"] == "Role")
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    scaler = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "inferbus-scaler"
    )
    grants = role_grants(role)
    assert {("apps", "deployments/scale", "get"), ("apps", "deployments/scale", "patch")} <= grants
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    account = scaler["spec"]["template"]["spec"]["serviceAccountName"]
    assert {"kind": "ServiceAccount", "name": account, "namespace": "inferbus"} in binding[
        "subjects"
    ]
    assert "kubernetes" in scaler["spec"]["template"]["spec"]["containers"][0]["args"]


def test_k8s_workers_match_the_actuator() -> None:
    workers = [
        d for d in k8s_docs()
        if d["kind"] == "Deployment" and d["metadata"]["name"].startswith("inferbus-worker-")
    ]  # fmt: skip
    assert len(workers) >= 2
    for doc in workers:
        (container,) = doc["spec"]["template"]["spec"]["containers"]
        group = group_of(container["args"])
        assert deployment_name(group) == doc["metadata"]["name"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert "replicas" not in doc["spec"], "kubectl apply would undo the scaler"


def test_k8s_models_configmap_is_valid_model_yaml() -> None:
    models = next(d for d in k8s_docs() if d["metadata"]["name"] == "inferbus-models")
    for key, text in models["data"].items():
        config = ModelConfig.model_validate(yaml.safe_load(text))
        assert f"{config.name}.model.yaml" == key


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def _served_groups(configs: list[ModelConfig]) -> set[str]:
    return {worker_group(config.name, tier) for config in configs for tier in config.tiers}


def test_compose_runs_a_worker_service_for_every_group_the_image_models_declare(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """Regression: demo-mlp's critical tier and demo-encoder's batch and critical tiers had
    no service: their requests were routed to topics no worker read, never answered. The
    image serves `inferbus models init`'s demo repository (Dockerfile)."""
    write_demo_models(tmp_path)
    repository = ModelRepository(tmp_path)
    declared = _served_groups([repository.config(name) for name in repository.names()])
    running = {
        group_of(service["command"])
        for name, service in compose["services"].items()
        if name.startswith("worker-")
    }

    assert running == declared


def test_k8s_runs_a_deployment_for_every_tier_its_models_declare_and_no_other() -> None:
    """A tier in model.yaml with no Deployment: ingest routes its requests to a topic no
    worker reads. Each Deployment takes a GPU, so the models declare only what runs."""
    models = next(d for d in k8s_docs() if d["metadata"]["name"] == "inferbus-models")
    declared = _served_groups(
        [ModelConfig.model_validate(yaml.safe_load(text)) for text in models["data"].values()]
    )
    running = {
        group_of(d["spec"]["template"]["spec"]["containers"][0]["args"])
        for d in k8s_docs()
        if d["kind"] == "Deployment" and d["metadata"]["name"].startswith("inferbus-worker-")
    }

    assert running == declared


def test_compose_publishes_ports_on_loopback_only(compose: dict[str, Any]) -> None:
    """Regression: Kafka's PLAINTEXT listener, Jaeger, Prometheus and Grafana were on 0.0.0.0."""
    published = {
        name: port
        for name, service in compose["services"].items()
        for port in service.get("ports", [])
    }
    assert published
    for name, port in published.items():
        assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every address"


def _interpolated_default(value: str) -> str:
    """`${VAR:-default}` as compose reads it with VAR unset."""
    assert value.startswith("${") and ":-" in value and value.endswith("}"), value
    return value[value.index(":-") + 2 : -1]


def _floors(configs: list[ModelConfig]) -> int:
    return sum(
        max(c.replicas.min, c.replicas.warm) for c in configs for _tier in c.tiers
    )  # one group per model and tier


def test_compose_scaler_has_a_replica_budget_and_the_host_project_dir(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """Regression: no budget (6 groups x replicas.max 12 on one GPU), and no project folder
    (added workers' `./models` mounts named /deploy/models on the host)."""
    env = compose["services"]["scaler"]["environment"]
    budget = int(_interpolated_default(env["INFERBUS_SCALER_MAX_TOTAL_REPLICAS"]))
    write_demo_models(tmp_path)
    repository = ModelRepository(tmp_path)
    floors = _floors([repository.config(name) for name in repository.names()])
    assert floors <= budget < floors * 12
    # Same name inside and out: the scaler's own `docker compose` reads the same value.
    assert env["INFERBUS_SCALER_COMPOSE_PROJECT_DIR"].startswith(
        "${INFERBUS_SCALER_COMPOSE_PROJECT_DIR:-${PWD"
    )


def test_compose_kafka_takes_inferbus_batches(compose: dict[str, Any]) -> None:
    """Regression: the broker kept its ~1 MiB message limit under 4 MiB record batches."""
    env = compose["services"]["kafka"]["environment"]
    settings = KafkaSettings()
    assert int(env["KAFKA_MESSAGE_MAX_BYTES"]) >= settings.max_request_bytes
    assert int(env["KAFKA_REPLICA_FETCH_MAX_BYTES"]) >= settings.max_request_bytes


def _metric_labels() -> set[str]:
    """Every label name inferbus's own metrics carry (a collector without samples yet too)."""
    labels: set[str] = set()
    for collector in REGISTRY._collector_to_names:
        if hasattr(collector, "_labelnames"):
            labels.update(collector._labelnames)
        else:  # the batch-fed stage histogram
            labels.update(getattr(collector, "labels", ()))
    assert {"service", "model", "tier", "stage"} <= labels
    return labels


def _target_labels(config: dict[str, Any]) -> set[str]:
    return {
        rule["target_label"]
        for job in config["scrape_configs"]
        for rule in job.get("relabel_configs", [])
        if "target_label" in rule and not rule["target_label"].startswith("__")
    }


@pytest.mark.parametrize("path", ["prometheus.yml", "prometheus-k8s.yml"])
def test_prometheus_target_labels_leave_the_metrics_own_labels_alone(path: str) -> None:
    """Regression: a target label `service` renamed inferbus_requests_total's own `service` to
    `exported_service`, and `{service="inferbus-worker"}` matched nothing under compose."""
    config = yaml.safe_load((ROOT / "infra" / "prometheus" / path).read_text())
    assert _target_labels(config) & _metric_labels() == set()


def _pods() -> list[tuple[str, dict[str, Any]]]:
    """(name, pod spec) of every Deployment and Job."""
    return [
        (f"{d['kind']}/{d['metadata']['name']}", d["spec"]["template"]["spec"])
        for d in k8s_docs()
        if d["kind"] in ("Deployment", "Job")
    ]


def _dockerfile_user() -> str:
    users = [
        line.split()[1]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("USER ")
    ]
    return users[0]


def test_the_image_runs_as_a_numeric_user() -> None:
    """runAsNonRoot cannot verify a user name: the kubelet refuses to start the pod."""
    uid, _, gid = _dockerfile_user().partition(":")
    assert uid.isdigit() and int(uid) > 0
    assert gid.isdigit()


@pytest.mark.parametrize(("name", "pod"), _pods(), ids=[name for name, _ in _pods()])
def test_k8s_pods_are_restricted_and_pull_only_when_missing(name: str, pod: dict[str, Any]) -> None:
    """Regression: no securityContext anywhere, and `inferbus:latest` with the default pull
    policy (Always) sent every node to docker.io/library/inferbus."""
    uid, _, gid = _dockerfile_user().partition(":")
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True
    assert (context["runAsUser"], context["runAsGroup"]) == (int(uid), int(gid))
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        assert container["imagePullPolicy"] == "IfNotPresent"
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    for volume in pod.get("volumes", []):
        assert "hostPath" not in volume


def test_k8s_scaler_has_a_replica_budget() -> None:
    scaler = next(
        d
        for d in k8s_docs()
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "inferbus-scaler"
    )
    (container,) = scaler["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    models = next(d for d in k8s_docs() if d["metadata"]["name"] == "inferbus-models")
    floors = _floors(
        [ModelConfig.model_validate(yaml.safe_load(text)) for text in models["data"].values()]
    )
    assert int(env["INFERBUS_SCALER_MAX_TOTAL_REPLICAS"]) >= floors


def _model_mounts(pod: dict[str, Any]) -> set[tuple[str, str]]:
    configmaps = {
        v["name"]
        for v in pod.get("volumes", [])
        if v.get("configMap", {}).get("name") == "inferbus-models"
    }
    (container,) = pod["containers"]
    return {
        (m["mountPath"], m["subPath"])
        for m in container.get("volumeMounts", [])
        if m["name"] in configmaps
    }


def test_k8s_topics_job_sees_the_model_yaml_the_services_see() -> None:
    """Regression: the Job read the image's demo model.yaml, so a canary added to the
    inferbus-models ConfigMap got no canary topics."""
    pods = dict(_pods())
    job = _model_mounts(pods["Job/inferbus-topics"])
    assert job
    for name, pod in pods.items():
        if name.startswith("Deployment/"):
            assert _model_mounts(pod) == job, name


def test_k8s_worker_probes_never_kill_a_worker_mid_build() -> None:
    """The engine loads (and TensorRT builds) in a thread while /healthz answers: liveness
    and startup stay on /healthz, the build is readiness's to hold off."""
    for name, pod in _pods():
        if "inferbus-worker-" not in name:
            continue
        (container,) = pod["containers"]
        assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_deploy_docs_apply_the_manifests_with_kustomize() -> None:
    """`kubectl apply -f infra/k8s/` also sends kustomization.yaml, which is no object."""
    commands = [
        line
        for line in (ROOT / "docs" / "deploy.md").read_text().splitlines()
        if line.startswith("kubectl apply")
    ]
    assert any(line.startswith("kubectl apply -k infra/k8s") for line in commands)
    assert not [line for line in commands if "-f infra/k8s" in line]


def role_grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(API group, resource, verb) for every rule of a Role."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
