"""`inferbus models promote|rollback|share`: the record each one publishes, and one-line
refusals for models that have no canary."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from infra.models.config import ModelConfig
from services.cli.main import app
from services.models.demo import mlp_config
from services.models.rollout import (
    RolloutRefused,
    against_current,
    manual_record,
    operator,
    status_lines,
)

AT = datetime(2025, 1, 1, tzinfo=UTC)


def config(rollout: dict[str, Any] | None) -> ModelConfig:
    raw = mlp_config().model_dump()
    raw["rollout"] = rollout
    return ModelConfig.model_validate(raw)


CANARY = config({"stable": "1", "canary": "2", "share": 0.1})


@pytest.mark.parametrize(
    ("action", "share", "state", "expected_share"),
    [
        pytest.param("promote", None, "promoted", 0.0, id="promote"),
        pytest.param("rollback", None, "rolled_back", 0.0, id="rollback"),
        pytest.param("share", 0.25, "canary", 0.25, id="share"),
    ],
)
def test_manual_records(
    action: Any, share: float | None, state: str, expected_share: float
) -> None:
    record = manual_record(CANARY, action, at=AT, by="cli:me@here", share=share, reason=None)
    assert (record.model, record.stable, record.canary) == ("demo-mlp", "1", "2")
    assert (record.state, record.share, record.by, record.at) == (
        state,
        expected_share,
        "cli:me@here",
        AT,
    )
    assert record.reason  # a default story when none is given


@pytest.mark.parametrize(
    ("model", "action", "share", "message"),
    [
        pytest.param(config(None), "promote", None, "has no canary", id="no-rollout"),
        pytest.param(
            config({"stable": "1"}), "rollback", None, "has no canary", id="stable-pin-only"
        ),
        pytest.param(CANARY, "share", 1.5, "between 0 and 1", id="share-too-big"),
        pytest.param(CANARY, "share", -0.1, "between 0 and 1", id="share-negative"),
    ],
)
def test_refusals(model: ModelConfig, action: Any, share: float | None, message: str) -> None:
    with pytest.raises(RolloutRefused, match=message):
        manual_record(model, action, at=AT, by="x", share=share)


def test_the_reason_given_is_kept() -> None:
    record = manual_record(CANARY, "rollback", at=AT, by="x", reason="p99 doubled in EU")
    assert record.reason == "p99 doubled in EU"


def test_operator_names_user_and_host() -> None:
    assert operator().startswith("cli:") and "@" in operator()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "models" / "demo-mlp"
    (folder / "1").mkdir(parents=True)
    mlp_config().dump(folder / "model.yaml")
    return tmp_path / "models"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(
            ["promote", "demo-mlp"], "error: model 'demo-mlp' has no canary", id="promote"
        ),
        pytest.param(
            ["rollback", "demo-mlp"], "error: model 'demo-mlp' has no canary", id="rollback"
        ),
        pytest.param(
            ["share", "demo-mlp", "0.5"], "error: model 'demo-mlp' has no canary", id="share"
        ),
        pytest.param(
            ["promote", "nope"], "error: model 'nope' is not in the repository", id="no-model"
        ),
    ],
)
def test_the_commands_refuse_in_one_line(repo: Path, args: list[str], expected: str) -> None:
    result = CliRunner().invoke(
        app, ["models", *args, "--dir", str(repo), "--bootstrap", "127.0.0.1:1"]
    )
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(expected), result.stderr
    assert result.stderr.count("\n") == 1


def test_a_bad_canary_folder_is_refused_naming_the_setting(repo: Path) -> None:
    path = repo / "demo-mlp" / "model.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["rollout"] = {"stable": "1", "canary": "2", "share": 0.1}
    path.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(
        app, ["models", "promote", "demo-mlp", "--dir", str(repo), "--bootstrap", "127.0.0.1:1"]
    )
    assert result.exit_code == 1
    assert "rollout.canary: version folder '2' does not exist" in result.stderr
    assert result.stderr.count("\n") == 1


ACTION_OF: dict[str, Any] = {"promoted": "promote", "rolled_back": "rollback", "canary": "share"}


def _current(state: str, by: str = "cli:you@there", canary: str = "2") -> Any:
    return manual_record(
        config({"stable": "1", "canary": canary, "share": 0.1}),
        ACTION_OF[state],
        at=AT,
        by=by,
        share=0.3 if state == "canary" else None,
        reason="p99 2x stable's" if by == "verdict" else None,
    )


@pytest.mark.parametrize(
    ("action", "current", "force", "outcome"),
    [
        pytest.param("share", None, False, None, id="nothing-in-force"),
        pytest.param("share", _current("canary"), False, None, id="share-over-share"),
        pytest.param(
            "share",
            _current("promoted"),
            False,
            "refused: would send them back",
            id="share-undoes-a-promotion",
        ),
        pytest.param(
            "share",
            _current("promoted", canary="3"),
            False,
            None,
            id="a-promotion-of-other-versions",
        ),
        pytest.param(
            "promote",
            _current("rolled_back", by="verdict"),
            False,
            "refused: the verdict rolled",
            id="promote-over-the-verdict",
        ),
        pytest.param(
            "promote",
            _current("rolled_back", by="verdict"),
            True,
            "promoting over the verdict",
            id="forced",
        ),
        pytest.param(
            "promote", _current("rolled_back"), False, None, id="promote-after-a-manual-rollback"
        ),
        pytest.param(
            "rollback", _current("rolled_back"), False, "already rolled back", id="rollback-twice"
        ),
        pytest.param(
            "promote", _current("promoted"), False, "already promoted", id="promote-twice"
        ),
    ],
)
def test_a_decision_by_hand_against_the_one_in_force(
    action: Any, current: Any, force: bool, outcome: str | None
) -> None:
    """`share` after `promote` sent the stable workers back without a word (rollout pass)."""
    record = manual_record(CANARY, action, at=AT, by="cli:me@here", share=0.2)
    if outcome is not None and outcome.startswith("refused: "):
        with pytest.raises(RolloutRefused, match=outcome.removeprefix("refused: ")):
            against_current(record, current, force=force)
        return
    note = against_current(record, current, force=force)
    if outcome is None:
        assert note is None
    else:
        assert note is not None and outcome in note


@pytest.fixture
def canary_repo(repo: Path) -> Path:
    path = repo / "demo-mlp" / "model.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["rollout"] = {"stable": "1", "canary": "2", "share": 0.1}
    path.write_text(yaml.safe_dump(raw))
    (repo / "demo-mlp" / "2").mkdir()
    return repo


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(
            ["share", "demo-mlp", "-0.1"], "error: share must be between 0 and 1", id="negative"
        ),
        pytest.param(
            ["promote", "demo-mlp", "--dir", "/nope/models"],
            "error: no model repository (--models): /nope/models",
            id="no-repository",
        ),
        pytest.param(
            ["status", "demo-mlp", "--dir", "/nope/models"],
            "error: no model repository (--models): /nope/models",
            id="status-without-a-repository",
        ),
    ],
)
def test_the_commands_say_what_is_wrong_before_any_broker(
    canary_repo: Path, args: list[str], expected: str
) -> None:
    """A negative share read as an option ('No such option: -0'); a missing --dir said the
    model was not in the repository."""
    where = [] if "--dir" in args else ["--dir", str(canary_repo)]
    result = CliRunner().invoke(app, ["models", *args, *where, "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(expected), result.stderr


@pytest.mark.parametrize(
    ("model", "decision", "expected"),
    [
        pytest.param(config(None), None, ["no rollout block"], id="no-rollout"),
        pytest.param(
            CANARY,
            None,
            ["canary 2 at share 0.1", "none", "stable workers serve 1, canary 2 takes share 0.1"],
            id="plan-alone",
        ),
        pytest.param(
            CANARY,
            _current("promoted"),
            ["promoted (stable 1, canary 2", "stable workers serve 2", "(promoted)"],
            id="promoted",
        ),
        pytest.param(
            CANARY,
            _current("promoted", canary="3"),
            ["made for other versions", "stable workers serve 1, canary 2 takes share 0.1"],
            id="a-decision-for-other-versions",
        ),
    ],
)
def test_status_says_plan_decision_and_what_is_in_force(
    model: ModelConfig, decision: Any, expected: list[str]
) -> None:
    text = "\n".join(status_lines(model, decision))
    for part in expected:
        assert part in text, text


@pytest.mark.parametrize(
    ("ready", "force", "outcome"),
    [
        pytest.param(True, False, None, id="a-canary-worker-serves-it"),
        pytest.param(None, False, None, id="not-asked"),
        pytest.param(False, False, "refused: no canary worker", id="none-serves-it"),
        pytest.param(False, True, "promoted anyway", id="forced"),
    ],
)
def test_promoting_a_canary_no_worker_serves(
    ready: bool | None, force: bool, outcome: str | None
) -> None:
    """`promote` of a canary that never came up exited 0: the stable workers then moved to
    a version that had served nothing."""
    record = manual_record(CANARY, "promote", at=AT, by="cli:me@here")
    if outcome is not None and outcome.startswith("refused: "):
        with pytest.raises(RolloutRefused, match=outcome.removeprefix("refused: ")):
            against_current(record, None, canary_ready=ready, force=force)
        return
    note = against_current(record, None, canary_ready=ready, force=force)
    assert note == outcome or (outcome is not None and note is not None and outcome in note)


def test_status_says_what_the_ready_workers_serve() -> None:
    """`in force` showed the plan while no canary worker was ready on it."""
    serving: dict[Any, Counter[str | None]] = {"stable": Counter({"1": 2}), "canary": Counter()}
    text = "\n".join(status_lines(CANARY, None, serving))
    assert "workers ready: stable 2 on 1; canary none" in text, text
