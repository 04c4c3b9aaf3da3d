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
from scaler.actuators.compose import service_name
from scaler.actuators.kubernetes import deployment_name
from schemas.topics import TIERS, worker_group
from services.models.demo import write_demo_models

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
    assert {"4317:4317", "4318:4318", "16686:16686"} <= set(services["jaeger"]["ports"])
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
    grants = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
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
