"""Cores to size for: the affinity mask capped by the cgroup CPU quota (infra/cores.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.cores import (
    affinity_cores,
    cgroup_paths,
    cgroup_quota_cores,
    quota_cores_v1,
    quota_cores_v2,
    usable_cores,
    usable_cores_from,
)


@pytest.mark.parametrize(
    ("line", "cores"),
    [
        ("max 100000\n", None),
        ("200000 100000\n", 2.0),
        ("150000 100000", 1.5),
        ("50000 100000", 0.5),
    ],
)
def test_v2_quota(line: str, cores: float | None) -> None:
    assert quota_cores_v2(line) == cores


@pytest.mark.parametrize("line", ["", "max", "0 100000", "100000 0", "a b"])
def test_v2_quota_that_is_not_one_is_an_error(line: str) -> None:
    with pytest.raises(ValueError):
        quota_cores_v2(line)


@pytest.mark.parametrize(
    ("quota", "period", "cores"),
    [("-1\n", "100000\n", None), ("400000\n", "100000\n", 4.0), ("25000", "100000", 0.25)],
)
def test_v1_quota(quota: str, period: str, cores: float | None) -> None:
    assert quota_cores_v1(quota, period) == cores


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("0::/\n", ("/", None)),
        ("0::/kubepods/pod1/c1\n", ("/kubepods/pod1/c1", None)),
        ("4:memory:/x\n2:cpuacct:/\n1:cpu:/\n0::/\n", ("/", "/")),
        ("3:cpu,cpuacct:/docker/abc\n", (None, "/docker/abc")),
        ("", (None, None)),
    ],
)
def test_cgroup_paths(text: str, paths: tuple[str | None, str | None]) -> None:
    assert cgroup_paths(text) == paths


@pytest.mark.parametrize(
    ("affinity", "quota", "cores"),
    [(64, None, 64), (64, 2.0, 2), (64, 1.5, 2), (2, 8.0, 2), (4, 0.25, 1), (0, None, 1)],
)
def test_usable_cores_from(affinity: int, quota: float | None, cores: int) -> None:
    assert usable_cores_from(affinity, quota) == cores


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    ("proc_cgroup", "files", "cores"),
    [
        pytest.param(
            "0::/kubepods/pod1\n",
            {"cpu.max": "max 100000\n", "kubepods/pod1/cpu.max": "300000 100000\n"},
            3.0,
            id="v2-nested-before-the-root",
        ),
        pytest.param("0::/\n", {"cpu.max": "150000 100000\n"}, 1.5, id="v2-namespaced-root"),
        pytest.param(
            "0::/kubepods/pod1/ctr\n",
            {
                "kubepods/pod1/cpu.max": "200000 100000\n",
                "kubepods/pod1/ctr/cpu.max": "max 100000\n",
            },
            2.0,
            id="v2-the-pods-limit-above-an-unlimited-container",
        ),
        pytest.param(
            "0::/system.slice/inferbus.service\n",
            {
                "system.slice/cpu.max": "400000 100000\n",
                "system.slice/inferbus.service/cpu.max": "250000 100000\n",
            },
            2.5,
            id="v2-the-tightest-of-the-ancestors",
        ),
        pytest.param(
            "4:cpu,cpuacct:/docker/abc\n",
            {
                "cpu,cpuacct/docker/cpu.cfs_quota_us": "150000\n",
                "cpu,cpuacct/docker/cpu.cfs_period_us": "100000\n",
                "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "-1\n",
                "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
            },
            1.5,
            id="v1-a-parents-quota",
        ),
        pytest.param(
            "5:cpu,cpuacct:/docker/abc\n0::/\n",
            {
                "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "200000\n",
                "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
            },
            2.0,
            id="v1-cfs-quota",
        ),
        pytest.param(
            "1:cpu:/\n",
            {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
            None,
            id="v1-unlimited",
        ),
    ],
)
def test_reads_the_quota_of_this_cgroup(
    tmp_path: Path, proc_cgroup: str, files: dict[str, str], cores: float | None
) -> None:
    proc = tmp_path / "proc-cgroup"
    _write(proc, proc_cgroup)
    for name, text in files.items():
        _write(tmp_path / "fs" / name, text)
    assert cgroup_quota_cores(tmp_path / "fs", proc) == cores


def test_no_cgroup_file_system_means_no_quota(tmp_path: Path) -> None:
    assert cgroup_quota_cores(tmp_path / "fs", tmp_path / "missing") is None
    proc = tmp_path / "proc-cgroup"
    _write(proc, "0::/\n")
    assert cgroup_quota_cores(tmp_path / "fs", proc) is None


def test_this_process_is_sized_within_its_affinity_mask() -> None:
    assert 1 <= usable_cores() <= affinity_cores()


@pytest.mark.parametrize(
    ("text", "where"),
    [("banana\n", "cpu.max"), ("0 100000\n", "cpu.max")],
)
def test_a_file_that_holds_no_quota_is_said_and_sizes_for_the_mask(
    tmp_path: Path, text: str, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    proc = tmp_path / "proc-cgroup"
    _write(proc, "0::/\n")
    _write(tmp_path / "fs" / where, text)
    assert cgroup_quota_cores(tmp_path / "fs", proc) is None
    assert "event=cgroup_quota_unreadable" in caplog.text
