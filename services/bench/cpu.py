"""CPU seconds per process (and per named thread) from the kernel's own counters (/proc).

A benchmark reads them before and after a phase; the difference divided by the requests
answered is each process's CPU cost per request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from services.worker.engine_host import ENGINE_THREAD

_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(stat_path: Path) -> float | None:
    try:
        text = stat_path.read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _comm(task: Path) -> str:
    try:
        return (task / "comm").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class ProcessCpu:
    """CPU seconds of one process so far: the whole, its main thread and its engine thread."""

    total_s: float
    main_s: float
    engine_s: float

    @property
    def other_s(self) -> float:
        return max(self.total_s - self.main_s - self.engine_s, 0.0)

    def minus(self, earlier: ProcessCpu) -> ProcessCpu:
        return ProcessCpu(
            self.total_s - earlier.total_s,
            self.main_s - earlier.main_s,
            self.engine_s - earlier.engine_s,
        )


def process_cpu_total(pid: int) -> float | None:
    """The process's CPU seconds so far (all threads); None when it is gone."""
    return _cpu_s(Path(f"/proc/{pid}/stat"))


def process_cpu(pid: int) -> ProcessCpu | None:
    """The process's CPU so far, split by thread; None when it is gone.

    The main thread runs the event loop; `ENGINE_THREAD` the engine; the rest are the
    engine's own pools (ONNX Runtime intra-op threads) and library threads.
    """
    base = Path(f"/proc/{pid}")
    total = _cpu_s(base / "stat")
    if total is None:
        return None
    main = _cpu_s(base / "task" / str(pid) / "stat") or 0.0
    engine = 0.0
    try:
        tasks = list((base / "task").iterdir())
    except OSError:
        tasks = []
    for task in tasks:
        if _comm(task) == ENGINE_THREAD:
            engine += _cpu_s(task / "stat") or 0.0
    return ProcessCpu(total, main, engine)


def machine_busy_s() -> float:
    """CPU seconds every core spent busy since boot (all but idle and iowait)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / _TICKS


class CpuMeter:
    """Snapshots of named processes (and the machine) taken at phase boundaries."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self._start: dict[str, ProcessCpu] = {}
        self._machine = 0.0

    def start(self) -> None:
        self._start = {name: cpu for name, pid in self.pids.items() if (cpu := process_cpu(pid))}
        self._machine = machine_busy_s()

    def stop(self, *, requests: int, seconds: float) -> dict[str, object]:
        """Per process: CPU ms per request and cores busy over the phase."""
        out: dict[str, object] = {}
        per_request: dict[str, float] = {}
        for name, pid in self.pids.items():
            now, before = process_cpu(pid), self._start.get(name)
            if now is None or before is None:
                continue
            used = now.minus(before)
            parts = {"total": used.total_s}
            if used.engine_s > 0:
                parts |= {"loop": used.main_s, "engine": used.engine_s, "other": used.other_s}
            for part, cpu_s in parts.items():
                key = name if part == "total" else f"{name}.{part}"
                per_request[key] = cpu_s * 1000 / max(requests, 1)
        out["cpu_ms_per_request"] = {k: round(v, 4) for k, v in per_request.items()}
        out["machine_cores_busy"] = round((machine_busy_s() - self._machine) / seconds, 3)
        return out
