"""The `inferbus try:` hint names the command as the user can copy it from where they are."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from services.cli import stack


@pytest.mark.parametrize(
    ("argv0", "from_elsewhere", "expected"),
    [
        (".venv/bin/inferbus", False, ".venv/bin/inferbus"),
        ("python", False, "inferbus"),
        ("{root}/.venv/bin/inferbus", False, ".venv/bin/inferbus"),
        ("{root}/.venv/bin/inferbus", True, "{root}/.venv/bin/inferbus"),
    ],
    ids=[
        "relative-kept",
        "not-the-script",
        "absolute-run-in-the-project",
        "absolute-run-from-elsewhere",
    ],
)
def test_the_hint_is_a_path_the_user_can_copy(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv0: str,
    from_elsewhere: bool,
    expected: str,
) -> None:
    root = tmp_path / "project"
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "inferbus").write_text("#!/bin/sh\n")
    elsewhere = tmp_path / "a" / "b" / "c"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere if from_elsewhere else root)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    monkeypatch.setattr(sys, "argv", [argv0.format(root=root)])
    assert stack._this_command() == expected.format(root=root)
