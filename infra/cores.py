"""How many cores this process may use: its affinity mask, capped by its cgroup's CPU quota.

A container limited to 2 CPUs on a 64-core node sees 64 in `os.cpu_count()` and (usually) in
its affinity mask; sizing the broker's threads or the local workers from that oversubscribes
the quota and the kernel throttles every process. The quota is read from cgroup v2
(`cpu.max`) or v1 (`cpu.cfs_quota_us` / `cpu.cfs_period_us`) and rounded up, as the JVM
and .NET runtimes count it."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path, PurePosixPath

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")


def quota_cores_v2(cpu_max: str) -> float | None:
    """Cores allowed by a cgroup v2 `cpu.max` line (`"max 100000"` or `"200000 100000"`);
    None when unlimited. Raises ValueError on a line that is neither."""
    fields = cpu_max.split()
    if len(fields) != 2:
        raise ValueError(f"cpu.max: expected '<quota|max> <period>', got {cpu_max!r}")
    quota, period = fields
    if quota == "max":
        return None
    return _ratio(int(quota), int(period))


def quota_cores_v1(quota_us: str, period_us: str) -> float | None:
    """Cores allowed by cgroup v1's `cpu.cfs_quota_us` and `cpu.cfs_period_us`; None when the
    quota is -1 (unlimited)."""
    quota = int(quota_us.strip())
    if quota < 0:
        return None
    return _ratio(quota, int(period_us.strip()))


def _ratio(quota: int, period: int) -> float:
    if quota <= 0 or period <= 0:
        raise ValueError(f"CPU quota {quota} over period {period}: both must be positive")
    return quota / period


def cgroup_paths(proc_self_cgroup: str) -> tuple[str | None, str | None]:
    """The process's cgroup v2 path and its v1 `cpu` controller path, from
    `/proc/self/cgroup` (`0::/path` and `N:cpu,cpuacct:/path` lines)."""
    v2: str | None = None
    v1: str | None = None
    for line in proc_self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def usable_cores_from(affinity: int, quota_cores: float | None) -> int:
    """The cores to size for: the affinity mask's count, capped by the quota rounded up,
    at least 1."""
    cores = max(1, affinity)
    if quota_cores is None:
        return cores
    return max(1, min(cores, math.ceil(quota_cores)))


def cgroup_quota_cores(
    root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP
) -> float | None:
    """This process's cgroup CPU quota in cores: the tightest of its cgroup's and every
    ancestor's (a pod's limit can sit on the pod's cgroup above the container's, a
    systemd slice's above its service's). None when there is none or it cannot be read
    (no cgroup file system: macOS, Windows, a bare chroot; a file that cannot be read or
    holds no quota is said in the log). cgroup v2 is read when it has `cpu.max` files,
    v1's `cpu` controller otherwise."""
    try:
        v2_path, v1_path = cgroup_paths(proc_self_cgroup.read_text())
    except OSError:
        return None
    try:
        v2 = [d / "cpu.max" for d in _ancestors(root, v2_path)]
        found = [quota_cores_v2(f.read_text()) for f in v2 if f.is_file()]
        if not found:
            v1 = [
                d
                for base in (root / "cpu,cpuacct", root / "cpu")
                for d in _ancestors(base, v1_path)
                if (d / "cpu.cfs_quota_us").is_file()
            ]
            found = [
                quota_cores_v1(
                    (d / "cpu.cfs_quota_us").read_text(), (d / "cpu.cfs_period_us").read_text()
                )
                for d in v1
            ]
    except (OSError, ValueError) as exc:  # unreadable or not a quota: size for the mask
        log.warning("event=cgroup_quota_unreadable error=%r sizing=affinity_mask", exc)
        return None
    return tightest(found)


def tightest(quotas: list[float | None]) -> float | None:
    """The smallest of the quotas that limit (None: unlimited), or None when none does."""
    limits = [q for q in quotas if q is not None]
    return min(limits) if limits else None


def _ancestors(root: Path, path: str | None) -> list[Path]:
    """The directory of cgroup `path` under `root`, then each parent up to `root`."""
    parts = PurePosixPath(path or "/").parts[1:]
    return [root.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def affinity_cores() -> int:
    """The cores in this process's affinity mask (`os.cpu_count()` where there is none)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def usable_cores() -> int:
    """The cores this process may use: the affinity mask, capped by the cgroup CPU quota."""
    return usable_cores_from(affinity_cores(), cgroup_quota_cores())
