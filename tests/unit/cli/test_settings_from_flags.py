"""A flag the user did not give leaves the setting to the service's environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.cli.main import ingest_settings, worker_settings


@pytest.mark.parametrize(
    ("env", "flags", "expected"),
    [
        pytest.param(
            {"INFERBUS_WORKER_TIERS": '["batch"]', "INFERBUS_WORKER_MODEL_VERSION": "2"},
            {},
            {"tiers": ["batch"], "model_version": "2"},
            id="env-only",
        ),
        pytest.param(
            {"INFERBUS_WORKER_TIERS": '["batch"]'},
            {"tier": "critical,interactive"},
            {"tiers": ["critical", "interactive"]},
            id="flag-wins",
        ),
        pytest.param({}, {}, {"tiers": ["interactive"], "model_version": None}, id="defaults"),
        pytest.param(
            {"INFERBUS_WORKER_MODELS_DIR": "/srv/models", "INFERBUS_WORKER_MODEL": "m"},
            {},
            {"models_dir": Path("/srv/models"), "model": "m"},
            id="models-dir-and-model-from-env",
        ),
    ],
)
def test_worker_settings(
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    flags: dict[str, str],
    expected: dict[str, object],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = worker_settings(
        flags.get("model"), flags.get("tier"), flags.get("models"), flags.get("version")
    )
    for field, value in expected.items():
        assert getattr(settings, field) == value


def test_ingest_models_dir_from_env_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERBUS_INGEST_MODELS_DIR", "/srv/models")
    assert ingest_settings(None).models_dir == Path("/srv/models")
    assert ingest_settings(Path("here")).models_dir == Path("here")


@pytest.mark.parametrize(
    ("env", "flag", "expected"),
    [
        pytest.param({}, None, "models", id="default"),
        pytest.param({"INFERBUS_MODELS_DIR": "/models"}, None, "/models", id="the-shared-one"),
        pytest.param(
            {"INFERBUS_MODELS_DIR": "/models", "{own}": "/own"}, None, "/own", id="its-own-first"
        ),
        pytest.param(
            {"INFERBUS_MODELS_DIR": "/models", "{own}": "/own"}, "here", "here", id="flag"
        ),
    ],
)
@pytest.mark.parametrize("service", ["WORKER", "INGEST"])
def test_a_service_reads_the_deployments_models_dir(
    monkeypatch: pytest.MonkeyPatch,
    service: str,
    env: dict[str, str],
    flag: str | None,
    expected: str,
) -> None:
    """Regression: compose, k8s and the Dockerfile set INFERBUS_MODELS_DIR=/models, and
    ingest and the workers ignored it (they served ./models)."""
    for name, value in env.items():
        monkeypatch.setenv(name.format(own=f"INFERBUS_{service}_MODELS_DIR"), value)
    given = None if flag is None else Path(flag)
    settings = (
        worker_settings(None, None, given, None) if service == "WORKER" else ingest_settings(given)
    )
    assert settings.models_dir == Path(expected)
