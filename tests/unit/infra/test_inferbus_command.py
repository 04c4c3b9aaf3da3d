"""A child `inferbus` runs this code, whatever packages the working directory holds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from infra.processes import code_root, inferbus_command, safe_path_flags


@pytest.mark.parametrize(
    ("root", "cwd", "flags"),
    [
        pytest.param("/srv/app", "/srv/app", [], id="a-checkout-run-from-itself"),
        pytest.param("/venv/site-packages", "/home/me/project", ["-P"], id="installed"),
        pytest.param("/srv/app", "/srv", ["-P"], id="above-the-checkout"),
        pytest.param("/srv/app", "/srv/app/services", ["-P"], id="inside-the-checkout"),
    ],
)
def test_the_working_directory_is_left_off_unless_it_is_the_code(
    root: str, cwd: str, flags: list[str]
) -> None:
    assert safe_path_flags(Path(root), Path(cwd)) == flags


def test_a_working_directory_linked_to_the_code_is_the_code(tmp_path: Path) -> None:
    (tmp_path / "checkout").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "checkout")
    assert safe_path_flags(tmp_path / "checkout", tmp_path / "link") == []


def test_a_removed_working_directory_is_left_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert inferbus_command("worker")[1:4] == ["-P", "-m", "services.cli.main"]


def test_a_project_with_its_own_services_package_does_not_shadow_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A user's project: `services/cli/` and `infra/` of its own, where `inferbus up` is run.
    for package in ("services", "services/cli", "infra", "scaler"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("raise ImportError('the decoy')\n")
    monkeypatch.chdir(tmp_path)
    assert code_root() != tmp_path
    done = subprocess.run(
        inferbus_command("worker", "--help"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "--model" in done.stdout
