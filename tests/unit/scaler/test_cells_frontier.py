"""`scripts/cells_frontier.py`: per-group means of scaler_cells.py tables, plotted."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.scaler.conftest import load_script

frontier = load_script("cells_frontier")


def _cell(group: str, attainment: float, cost: float, every: bool) -> dict[str, Any]:
    return {
        "group": group,
        "attainment_pct": attainment,
        "cost_vs_oracle": cost,
        "every_target": every,
    }


TABLE = {
    "on-off-s1-x20": _cell("tuning", 98.0, 1.10, True),
    "on-off-s2-x20": _cell("tuning", 96.0, 1.30, False),
    "on-off-s9-x20": _cell("held-out", 95.0, 1.34, False),
}


def test_summarize_averages_each_group() -> None:
    got = frontier.summarize(TABLE)
    assert set(got) == {"tuning", "held-out"}
    tuning = got["tuning"]
    assert (tuning.cells, tuning.failed, tuning.every_target) == (2, 0, 1)
    assert tuning.mean_attainment_pct == pytest.approx(97.0)
    assert tuning.mean_cost_vs_oracle == pytest.approx(1.20)
    assert got["held-out"].every_target == 0


def test_a_failed_cell_is_counted_not_averaged() -> None:
    failed = {"group": "tuning", "error": "inferbus sim exited 1"}
    got = frontier.summarize({**TABLE, "on-off-s3-x20": failed})["tuning"]
    assert (got.cells, got.failed, got.every_target) == (3, 1, 1)
    assert got.mean_attainment_pct == pytest.approx(97.0)


def test_a_group_with_no_judged_cell_is_refused() -> None:
    with pytest.raises(ValueError, match="every cell of 'tuning' failed"):
        frontier.summarize({"on-off-s1-x20": {"group": "tuning", "error": "timed out"}})


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        pytest.param("stop 51=a/cells.json", ("stop 51", Path("a/cells.json")), id="label"),
        pytest.param("q=0.7=b.json", ("q", Path("0.7=b.json")), id="first-equals-splits"),
        pytest.param("cells.json", None, id="no-label"),
        pytest.param("=cells.json", None, id="empty-label"),
        pytest.param("label=", None, id="empty-path"),
    ],
)
def test_labelled(arg: str, expected: tuple[str, Path] | None) -> None:
    if expected is None:
        with pytest.raises(argparse.ArgumentTypeError, match=r"LABEL=CELLS\.json"):
            frontier.labelled(arg)
    else:
        assert frontier.labelled(arg) == expected


def test_main_writes_the_plot_and_the_means(tmp_path: Path) -> None:
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps({"cells": TABLE}))
    cheaper = {k: {**v, "cost_vs_oracle": v["cost_vs_oracle"] - 0.1} for k, v in TABLE.items()}
    after.write_text(json.dumps({"cells": cheaper}))
    png, out = tmp_path / "f.png", tmp_path / "f.json"
    code = frontier.main([str(png), f"before={before}", f"after={after}", "--json", str(out)])
    assert code == 0 and png.stat().st_size > 0
    means = json.loads(out.read_text())
    assert means["after"]["tuning"]["mean_cost_vs_oracle"] == pytest.approx(1.10)
    assert means["before"]["held-out"]["every_target"] == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("not json", "not a scaler_cells.py table", id="not-json"),
        pytest.param('{"rows": {}}', "not a scaler_cells.py table", id="no-cells-key"),
        pytest.param('{"cells": {}}', "no cells", id="empty"),
        pytest.param('{"cells": [1]}', "not a table of cells by name", id="a-list"),
        pytest.param('{"cells": {"a": 1}}', "cell 'a' is not a judged", id="not-a-cell"),
        pytest.param('{"cells": {"a": {"group": "g"}}}', "cell 'a'", id="no-figures"),
        pytest.param(
            '{"cells": {"a": {"group": "g", "error": "x"}}}', "every cell of 'g'", id="all-failed"
        ),
    ],
)
def test_a_file_that_is_no_table_is_named(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    with pytest.raises(SystemExit, match=message):
        frontier.main([str(tmp_path / "f.png"), f"x={bad}"])


def test_repeated_labels_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"cells": TABLE}))
    with pytest.raises(SystemExit):
        frontier.main([str(tmp_path / "f.png"), f"a={table}", f"a={table}"])
    assert "labels repeat" in capsys.readouterr().err
