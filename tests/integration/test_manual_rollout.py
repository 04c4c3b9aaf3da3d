"""`inferbus models promote|rollback|share` on a real broker: each reads the decision in force
first, so a `share` after a `promote` is refused instead of sending stable back unsaid."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.models.repository import ModelRepository
from infra.topics import ensure_topics, repository_topics
from services.cli.main import app
from services.models.rollout import current_decision, manual_record, publish_manual
from tests.integration.test_canary import canary_model

pytestmark = pytest.mark.integration


def _models(args: list[str], repo: Path, broker: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["models", *args, "--dir", str(repo), "--bootstrap", broker])
    return result.exit_code, result.stdout, result.stderr


async def test_the_decision_in_force_is_read_back(broker: str, tmp_path: Path) -> None:
    repo = tmp_path / "models"
    name = canary_model(repo, canary_sim="a_ms: 2\n", share=0.2)
    await ensure_topics(broker, repository_topics(ModelRepository(repo)))
    assert await current_decision(broker, name) is None
    config = ModelRepository(repo).config(name)
    for action in ("rollback", "promote"):
        record = manual_record(config, action, at=datetime.now(UTC), by="cli:test@here")
        await publish_manual(broker, record)
    found = await current_decision(broker, name)
    assert found is not None and found.state == "promoted"


async def test_share_after_promote_is_refused_and_a_repeat_is_said(
    broker: str, tmp_path: Path
) -> None:
    repo = tmp_path / "models"
    name = canary_model(repo, canary_sim="a_ms: 2\n", share=0.2)
    await ensure_topics(broker, repository_topics(ModelRepository(repo)))
    code, _, err = await asyncio.to_thread(_models, ["promote", name], repo, broker)
    assert code == 1 and "no canary worker" in err and "--force" in err, err
    code, out, err = await asyncio.to_thread(_models, ["promote", name, "--force"], repo, broker)
    assert code == 0 and "promoted" in out and "promoted anyway" in out, err
    code, _, err = await asyncio.to_thread(_models, ["share", name, "0.2"], repo, broker)
    assert code == 1
    assert err.startswith(f"error: model {name!r} is promoted"), err
    assert "would send them back to '1'" in err and err.count("\n") == 1
    code, out, _ = await asyncio.to_thread(_models, ["promote", name, "--force"], repo, broker)
    assert code == 0 and "already promoted" in out
    code, out, _ = await asyncio.to_thread(_models, ["status", name], repo, broker)
    assert code == 0 and "in force: stable workers serve 2" in out, out
    assert "workers ready: stable none; canary none" in out, out
