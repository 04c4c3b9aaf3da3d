"""How long a standby scaler takes to act after the holder of the lease goes, on the
embedded broker (`scaler/lease.py`, `scaler/lease_keeper.py`).

Each trial makes a fresh lease log, lets one keeper take the lease and a second wait, then
ends the holder one of three ways and times the standby's `lease_taken`:

- `release`: a clean stop (SIGTERM) releases the lease;
- `death`: the process dies (SIGKILL): no record more;
- `cut-off`: the holder is cut off from the broker (its writes fail, its reads stall) but
  goes on running; it must stop acting before the standby acts (`overlap_s` < 0).

    python scripts/lease_takeover.py OUT [--lease-s 4] [--trials 10] [--plot-only]

Writes OUT/lease_takeover.json and OUT/lease_takeover.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from infra.broker import EmbeddedBroker
from infra.tasks import within
from scaler.lease import LeaseKind
from scaler.lease_keeper import LeaseKeeper

WAYS = ("release", "death", "cut-off")


async def _trial(bootstrap: str, way: str, lease_s: float) -> dict[str, float | None]:
    topic = f"lease-bench-{uuid.uuid4().hex[:8]}"
    holder = LeaseKeeper(bootstrap, holder="holder", lease_s=lease_s, topic=topic)
    standby = LeaseKeeper(bootstrap, holder="standby", lease_s=lease_s, topic=topic)
    await holder.start()
    await standby.start()
    stop = asyncio.Event()
    try:
        assert await holder.acquire(stop)
        waiting = asyncio.create_task(standby.acquire(stop))
        await asyncio.sleep(1.5 * lease_s)  # renewals heard: the standby waits
        assert not waiting.done(), "the standby took a lease that was renewed"
        ended = time.monotonic()
        holder_stops = None
        if way == "release":
            await holder.release()
        elif way == "death":
            await holder.close()
        else:
            _cut_off(holder)
            holder_stops = asyncio.create_task(_when_set(holder.lost))
        await within(waiting, 3 * lease_s)
        took = time.monotonic() - ended
        stopped = None
        if holder_stops is not None:
            stopped = await within(holder_stops, lease_s) - ended
        return {
            "takeover_s": round(took, 3),
            "holder_stopped_s": None if stopped is None else round(stopped, 3),
            "overlap_s": None if stopped is None else round(stopped - took, 3),
        }
    finally:
        stop.set()
        await standby.close()
        await holder.close()


async def _when_set(event: asyncio.Event) -> float:
    await event.wait()
    return time.monotonic()


def _cut_off(keeper: LeaseKeeper) -> None:
    """Its reads stall and its writes fail from now on, as a network partition does."""
    keeper._consumer.pause(keeper._tp)

    async def fails(kind: LeaseKind, term: int, written_at: float) -> bool:
        await asyncio.sleep(0.05)
        return False

    keeper._send = fails  # type: ignore[method-assign]


async def _run(lease_s: float, trials: int) -> dict[str, Any]:
    broker = EmbeddedBroker(port=0)
    bootstrap = await asyncio.to_thread(broker.start)
    results: dict[str, list[dict[str, float | None]]] = {way: [] for way in WAYS}
    try:
        for n in range(trials):
            for way in WAYS:
                got = await _trial(bootstrap, way, lease_s)
                results[way].append(got)
                print(f"[{n + 1}/{trials}] {way}: {got}", file=sys.stderr, flush=True)
    finally:
        await asyncio.to_thread(broker.stop)
    summary = {}
    for way, rows in results.items():
        takes = [float(r["takeover_s"] or 0.0) for r in rows]
        overlaps = [float(r["overlap_s"]) for r in rows if r["overlap_s"] is not None]
        summary[way] = {
            "takeover_median_s": round(statistics.median(takes), 3),
            "takeover_max_s": round(max(takes), 3),
            "overlap_max_s": round(max(overlaps), 3) if overlaps else None,
        }
    return {
        "command": " ".join(sys.argv),
        "lease_s": lease_s,
        "trials": trials,
        "summary": summary,
        "trials_by_way": results,
    }


def _plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for i, way in enumerate(WAYS):
        rows = report["trials_by_way"][way]
        takes = [r["takeover_s"] for r in rows]
        first = i == 0
        ax.scatter(
            takes, [i] * len(rows), color="tab:blue", label="standby acts" if first else None
        )
        stopped = [r["holder_stopped_s"] for r in rows if r["holder_stopped_s"] is not None]
        if stopped:
            ax.scatter(
                stopped, [i] * len(stopped), color="tab:red", marker="x", label="holder stops"
            )
    ax.axvline(report["lease_s"], color="grey", linestyle=":", label="lease")
    ax.set_yticks(range(len(WAYS)), WAYS)
    ax.set_xlabel("seconds after the holder went")
    ax.set_title(f"Lease takeover on the embedded broker ({report['trials']} trials each)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--lease-s", type=float, default=4.0)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--plot-only", action="store_true", help="Plot OUT's JSON again.")
    args = parser.parse_args(argv)
    if args.plot_only:
        report = json.loads((args.out / "lease_takeover.json").read_text())
        _plot(report, args.out / "lease_takeover.png")
        return
    if args.lease_s < 2 or args.trials < 1:
        parser.error("--lease-s must be at least 2 and --trials at least 1")
    report = asyncio.run(_run(args.lease_s, args.trials))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lease_takeover.json").write_text(json.dumps(report, indent=2) + "\n")
    _plot(report, args.out / "lease_takeover.png")
    print(json.dumps(report["summary"], indent=2))


if __name__ == "__main__":
    main()
