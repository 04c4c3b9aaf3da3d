"""`scripts/scaler_cells.py`: its cells are the recorded ones, judged as issue 10 does."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).parents[3]
RECORDED = ROOT / "docs" / "bench" / "scaler-bursty"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "scaler_cells", ROOT / "scripts" / "scaler_cells.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


cells_script = _script()


def test_the_stop42_cells_are_the_recorded_ones_in_their_sets() -> None:
    recorded = json.loads((RECORDED / "stop42" / "cells.json").read_text())["cells"]
    chosen = {c.name: c.set for c in cells_script.cells("stop42")}
    assert chosen == {name: cell["set"] for name, cell in recorded.items()}


def test_the_stop49_cells_are_the_recorded_ones() -> None:
    recorded = json.loads((RECORDED / "stop49" / "shapes.json").read_text())["cells"]
    assert {c.name for c in cells_script.cells("stop49")} == set(recorded)
    assert len(cells_script.cells("all")) == len(recorded) + 142


def test_every_cell_has_a_recorded_best_baseline() -> None:
    recorded = cells_script.best_baselines()
    missing = [c.name for c in cells_script.cells("all") if c.name not in recorded]
    assert not missing
    oracle, best = recorded["periodic-s1-x30"]
    assert (oracle, best) == (95.817, 96.127)  # hpa-util, the higher of the two baselines


@pytest.mark.parametrize(
    ("attainment", "cost", "oracle", "best", "at_least_best", "every"),
    [
        pytest.param(99.1, 1.1, 99.6, 95.0, True, True, id="all-met"),
        pytest.param(99.1, 1.2, 99.6, 95.0, True, True, id="cost-at-the-line"),
        pytest.param(99.1, 1.2001, 99.6, 95.0, True, False, id="cost-over"),
        pytest.param(
            98.9, 1.1, 99.6, 95.0, True, False, id="under-99-where-the-oracle-reaches-99.5"
        ),
        pytest.param(98.9, 1.1, 99.4, 95.0, True, True, id="under-99-where-the-oracle-does-not"),
        pytest.param(94.9, 1.1, 99.4, 95.0, False, False, id="under-the-best-baseline"),
    ],
)
def test_judge_counts_issue_10s_targets(
    attainment: float, cost: float, oracle: float, best: float, at_least_best: bool, every: bool
) -> None:
    assert cells_script.judge(attainment, cost, oracle, best) == {
        "at_least_best_baseline": at_least_best,
        "every_target": every,
    }


def _row(attainment: float, cost: float) -> dict[str, Any]:
    return {"attainment_pct": attainment, "cost_vs_oracle": cost}


def test_moved_names_only_cells_beyond_rounding() -> None:
    old = {"a": _row(99.0, 1.1), "b": _row(99.0, 1.1), "c": _row(99.0, 1.1)}
    new = {"a": _row(99.004, 1.1004), "b": _row(98.9, 1.1), "c": _row(99.0, 1.12), "d": _row(1, 1)}
    assert cells_script.moved(old, new) == [
        "b: 99.00 % at 1.100x -> 98.90 % at 1.100x",
        "c: 99.00 % at 1.100x -> 99.00 % at 1.120x",
    ]


def test_counts_tally_per_set() -> None:
    table = {
        "x": {"set": "tuning", "at_least_best_baseline": True, "every_target": False},
        "y": {"set": "tuning", "at_least_best_baseline": True, "every_target": True},
        "z": {"set": "stop49", "at_least_best_baseline": False, "every_target": False},
    }
    assert cells_script.counts(table) == {
        "tuning": {"cells": 2, "at_least_best_baseline": 2, "every_target": 1},
        "stop49": {"cells": 1, "at_least_best_baseline": 0, "every_target": 0},
    }
