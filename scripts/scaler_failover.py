"""The acting scaler killed, frozen or stopped under load, with a standby beside it: what
the requests saw (docs/reliability.md, "Stop 59").

Each way starts its own stack on a fresh embedded broker: `topics create`,
`ingest`, two `inferbus scaler run` (the local actuator, a short lease) and `inferbus load`
on demo-mlp's interactive tier; `--at` seconds into the load the holder is

- `kill`: SIGKILL (its workers die with it; the standby starts its own cold);
- `freeze`: SIGSTOP for `--freeze-s`, then SIGCONT (its workers go on serving);
- `term`: SIGTERM, a clean stop (it hands its workers over, `scaler/handover.py`).

    python scripts/scaler_failover.py OUT [--ways kill,freeze,term] [--lease-s 4]
                                          [--rate 20] [--duration 80] [--at 30]

Writes OUT/WAY/ (every process's log but the broker's, the load's report), OUT/failover.json and
OUT/failover.png (e2e latency by send time, the fault marked).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from infra.broker import EmbeddedBroker
from infra.processes import inferbus_command

ROOT = Path(__file__).resolve().parent.parent
WAYS = ("kill", "freeze", "term")
MODEL = "demo-mlp"
TIER = "interactive"
GROUPS = 6
"""Worker groups of the demo models (2 models x 3 tiers): one worker each at the start."""
START_WAIT_S = 120.0
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_times(text: str, event: str) -> list[datetime]:
    """When each line of a log (the services' `asctime` format) says `event`."""
    out = []
    for line in text.splitlines():
        found = LOG_TIME.match(line)
        if found and event in line:
            out.append(datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f"))
    return out


def first_after(times: Sequence[datetime], at: datetime) -> float | None:
    """Seconds from `at` to the first of `times` at or after it, or None."""
    later = [(t - at).total_seconds() for t in times if t >= at]
    return min(later) if later else None


def summary(
    report: dict[str, Any], standby_log: str, holder_log: str, fault: datetime
) -> dict[str, Any]:
    """One way's figures: the load's totals and the scalers' times after the fault."""
    tier = report["tiers"][TIER]
    totals = report["totals"]
    handed = re.findall(r"event=handed_over to=\S+ after_s=([\d.]+)", holder_log)
    return {
        "sent": totals["sent"],
        "answered": totals["answered"],
        "lost": totals["lost"],
        "duplicates": totals["duplicates"],
        "errors": sum(n for s, n in totals["statuses"].items() if s != "ok"),
        "e2e_p50_ms": tier["e2e_ms"]["p50"],
        "e2e_p99_ms": tier["e2e_ms"]["p99"],
        "lease_taken_after_s": first_after(log_times(standby_log, "event=lease_taken"), fault),
        "standby_worker_ready_after_s": first_after(
            log_times(standby_log, "event=worker_ready"), fault
        ),
        "handed_over_after_s": float(handed[-1]) if handed else None,
        "checks": {c["name"]: c["ok"] for c in report["checks"]},
    }


@dataclass
class Stack:
    """The processes of one way, each in its own session, logs under `folder`."""

    folder: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    files: list[IO[bytes]] = field(default_factory=list)

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        out = (self.folder / f"{name}.log").open("wb")
        self.files.append(out)
        proc = subprocess.Popen(
            inferbus_command(*args),
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def until_logged(self, name: str, event: str, count: int = 1) -> None:
        deadline = time.monotonic() + START_WAIT_S
        while self.log(name).count(event) < count:
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"{name} exited before {event!r}: see {self.folder}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: no {event!r} in {START_WAIT_S:.0f} s")
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGCONT and SIGTERM to every session left, SIGKILL after 20 s."""
        for proc in self.procs.values():
            for sig in (signal.SIGCONT, signal.SIGTERM):
                if proc.poll() is None:
                    os.killpg(proc.pid, sig)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for out in self.files:
            out.close()


def run_way(way: str, out: Path, models: Path, args: argparse.Namespace) -> dict[str, Any]:
    folder = out / way
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "INFERBUS_SCALER_LEASE_S": str(args.lease_s), "PYTHONUNBUFFERED": "1"}
    stack = Stack(folder, env)
    embedded = EmbeddedBroker(port=0)  # a fresh one per way: no lease or offsets carried over
    broker = embedded.start()
    try:
        topics = subprocess.run(
            inferbus_command("topics", "create", "-b", broker, "--models", str(models)),
            cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if topics.returncode != 0:
            raise RuntimeError(f"topics create failed: {topics.stdout}{topics.stderr}")
        stack.start("ingest", "ingest", "-b", broker, "--models", str(models))
        holder = stack.start("holder", "scaler", "run", "-b", broker, "--models", str(models))
        stack.until_logged("holder", "event=lease_taken")
        stack.until_logged("holder", "event=worker_ready", GROUPS)
        stack.start("standby", "scaler", "run", "-b", broker, "--models", str(models))
        stack.until_logged("standby", "event=scaler_standby holder=scaler-")
        print(f"[{way}] stack up on {broker}; load {args.rate}/s for {args.duration} s", flush=True)
        load = stack.start(
            "load", "load", "-b", broker, "--models", str(models), "-m", MODEL,
            "--rate", str(args.rate), "--duration", str(args.duration), "--tiers", TIER,
            "--out", str(folder / "load"), "--grace", "60", "--no-predict",
        )  # fmt: skip
        stack.until_logged("load", "load sending t=0s")  # its clock's 0, as in its report
        time.sleep(args.at)
        fault = datetime.now()
        if way == "kill":
            os.kill(holder.pid, signal.SIGKILL)
        elif way == "freeze":
            os.kill(holder.pid, signal.SIGSTOP)
            time.sleep(args.freeze_s)
            os.kill(holder.pid, signal.SIGCONT)
        else:
            os.kill(holder.pid, signal.SIGTERM)
        print(f"[{way}] fault at t={args.at:.0f} s; waiting for the load to end", flush=True)
        load.wait(args.duration + 180)
        report = json.loads((folder / "load" / "report.json").read_text())
        row = summary(report, stack.log("standby"), stack.log("holder"), fault)
        row["series"] = report["series"][TIER]["e2e_by_send_time"]
        return row
    finally:
        stack.stop()
        embedded.stop()


def plot(results: dict[str, dict[str, Any]], at_s: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.8), squeeze=False)
    for ax, (way, row) in zip(axes[0], results.items(), strict=True):
        series = row["series"]
        ax.plot(series["t"], series["p99"], label="p99")
        ax.plot(series["t"], series["p50"], label="p50")
        ax.axvline(at_s, color="red", linestyle="--", label=way)
        ax.set_yscale("log")
        ax.set_xlabel("send time, s")
        ax.set_ylabel("e2e ms")
        ax.set_title(
            f"{way}: p99 {row['e2e_p99_ms']:.0f} ms, lost {row['lost']}, twice {row['duplicates']}"
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--lease-s", type=float, default=4.0)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=80.0)
    parser.add_argument("--at", type=float, default=30.0)
    parser.add_argument("--freeze-s", type=float, default=30.0)
    args = parser.parse_args(argv)
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    wrong = [w for w in ways if w not in WAYS]
    if wrong or not ways:
        parser.error(f"--ways takes some of {', '.join(WAYS)}, not {args.ways!r}")
    if not 0 < args.at < args.duration:
        parser.error("--at must fall inside the load's --duration")
    args.out.mkdir(parents=True, exist_ok=True)
    models = args.out / "models"
    if not models.exists():
        subprocess.run(
            inferbus_command("models", "init", "--models", str(models)),
            cwd=ROOT, check=True, capture_output=True, timeout=300,
        )  # fmt: skip
    results: dict[str, dict[str, Any]] = {}
    for way in ways:
        started = time.monotonic()
        results[way] = run_way(way, args.out, models, args)
        row = {k: v for k, v in results[way].items() if k != "series"}
        print(f"[{way}] done in {time.monotonic() - started:.0f} s: {json.dumps(row)}", flush=True)
    document = {
        "command": " ".join(sys.argv),
        "lease_s": args.lease_s,
        "rate": args.rate,
        "duration_s": args.duration,
        "fault_at_s": args.at,
        "freeze_s": args.freeze_s,
        "ways": results,
    }
    (args.out / "failover.json").write_text(json.dumps(document, indent=1) + "\n")
    plot(results, args.at, args.out / "failover.png")
    shutil.rmtree(models, ignore_errors=True)
    print(f"wrote {args.out / 'failover.json'} and {args.out / 'failover.png'}")
    bad = [w for w, r in results.items() if r["lost"] or r["duplicates"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
