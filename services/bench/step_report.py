"""The scale-step report's newer parts (pure): per-partition service from the recorded
answers and registry, CPU per phase, live vs simulated, and the targets of issue 10."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schemas.telemetry import InstanceRecord
from services.bench.handover import KILL_MARGIN_S, OwnerRecord, Served

STILL_GAP_TARGET_S = 0.5
MOVED_GAP_TARGET_S = 1.0
STEP_ATTAINMENT_TARGET = 0.90
AFTER_ATTAINMENT_TARGET = 0.99


@dataclass(frozen=True, slots=True)
class Reply:
    """The first result of one request as the load generator read it."""

    status: str
    worker: str | None
    queue_ms: float | None


@dataclass(frozen=True, slots=True)
class Landed:
    """Where a request landed on the tier topic."""

    partition: int
    offset: int
    timestamp_s: float
    """Epoch s."""


def served_records(
    sent: Sequence[str],
    replies: Mapping[str, Reply],
    landed: Mapping[str, Landed],
    origin_s: float,
) -> tuple[list[Served], int]:
    """Every sent request that was seen on the tier topic as a `Served` (times from
    `origin_s`, epoch s); and how many sent requests never showed on the topic.

    The read time is the record's timestamp plus the answer's queue_ms (the worker's poll
    minus the record's timestamp, by the worker's own clock reading).
    """
    out: list[Served] = []
    unseen = 0
    for request_id in sent:
        where = landed.get(request_id)
        if where is None:
            unseen += 1
            continue
        reply = replies.get(request_id)
        polled = None
        if reply is not None and reply.queue_ms is not None:
            polled = where.timestamp_s + reply.queue_ms / 1000 - origin_s
        out.append(
            Served(
                partition=where.partition,
                offset=where.offset,
                available_t=where.timestamp_s - origin_s,
                polled_t=polled,
                worker=reply.worker if reply is not None else None,
            )
        )
    return out, unseen


def owner_records(
    records: Sequence[InstanceRecord], topic: str, origin_s: float
) -> list[OwnerRecord]:
    """Registry records as ownership over time (times from `origin_s`, epoch s)."""
    return sorted(
        (
            OwnerRecord(
                t=r.updated_at.timestamp() - origin_s,
                instance=r.instance_id,
                state=r.state,
                owned=frozenset(r.owned.get(topic, ())) if r.state != "gone" else frozenset(),
                standby=r.standby,
            )
            for r in records
        ),
        key=lambda r: r.t,
    )


def time_to_ready(
    records: Sequence[InstanceRecord], since_s: float, spawned: Mapping[int, float] | None = None
) -> dict[str, Any]:
    """Start to ready of every worker that became ready after `since_s` (epoch s): as the
    worker reports it (its process start to ready), and from `spawned` (pid -> when the
    benchmark first saw the process, epoch s) to its `ready` record."""
    reported: dict[str, float] = {}
    observed: dict[str, float] = {}
    for r in records:
        if r.state != "ready" or r.ready_at is None or r.ready_at.timestamp() < since_s:
            continue
        if r.time_to_ready_s is not None:
            reported.setdefault(r.instance_id, r.time_to_ready_s)
        seen = (spawned or {}).get(r.pid) if r.pid is not None else None
        if seen is not None:
            observed.setdefault(r.instance_id, r.ready_at.timestamp() - seen)

    def summary(values: list[float]) -> tuple[float | None, float | None]:
        values = sorted(values)
        if not values:
            return None, None
        return round(values[len(values) // 2], 2), round(values[-1], 2)

    median, most = summary(list(reported.values()))
    spawn_median, spawn_most = summary(list(observed.values()))
    return {
        "workers": len(reported),
        "median_s": median,
        "max_s": most,
        "spawn_to_ready_median_s": spawn_median,
        "spawn_to_ready_max_s": spawn_most,
    }


def cpu_by_phase(
    samples: Sequence[tuple[float, float, Mapping[str, float]]],
    phases: Sequence[tuple[str, float, float]],
    origin_s: float,
) -> dict[str, dict[str, float]]:
    """Per phase: cores busy per role and on the whole machine; `other` is what the
    machine ran besides this run's processes (other work on a shared host)."""
    out: dict[str, dict[str, float]] = {}
    times = [t - origin_s for t, _, _ in samples]
    for name, start, end in phases:
        inside = [i for i, t in enumerate(times) if start <= t <= end]
        if len(inside) < 2:
            continue
        first, last = samples[inside[0]], samples[inside[-1]]
        span = last[0] - first[0]
        if span <= 0:
            continue
        row = {
            role: round((last[2].get(role, 0.0) - first[2].get(role, 0.0)) / span, 3)
            for role in last[2]
        }
        row["machine"] = round((last[1] - first[1]) / span, 3)
        row["other"] = round(
            max(row["machine"] - sum(v for k, v in row.items() if k != "machine"), 0.0), 3
        )
        out[name] = row
    return out


def worker_cores(
    worker_cpu: Mapping[int, Sequence[tuple[float, float]]], start_s: float, end_s: float
) -> dict[str, float]:
    """Per worker pid: cores busy between two epoch times (over the part it was alive)."""
    out: dict[str, float] = {}
    for pid, series in worker_cpu.items():
        inside = [(t, c) for t, c in series if start_s <= t <= end_s]
        if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
            cores = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
            out[str(pid)] = round(cores, 3)
    return out


def latency_breakdown(
    sent: Sequence[tuple[str, float]],
    e2e_and_queue: Mapping[str, tuple[float | None, float | None]],
    landed: Mapping[str, Landed],
    origin_s: float,
    phases: Sequence[tuple[str, float, float]],
) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per phase (by send time), p50/p99 ms of where each answered request's time went:
    `ingest` (sent to on the tier topic: the ingest topic, ingest, the produce),
    `queue` (on the tier topic until a worker read it: what a handover pauses) and
    `worker` (the rest of e2e: batching, engine, publishing)."""
    parts: dict[str, dict[str, list[float]]] = {
        name: {"ingest": [], "queue": [], "worker": []} for name, _, _ in phases
    }
    for request_id, sent_t in sent:
        e2e, queue = e2e_and_queue.get(request_id, (None, None))
        where = landed.get(request_id)
        if e2e is None or queue is None or where is None:
            continue
        name = next((n for n, lo, hi in phases if lo <= sent_t < hi), None)
        if name is None:
            continue
        ingest = (where.timestamp_s - origin_s - sent_t) * 1000
        parts[name]["ingest"].append(ingest)
        parts[name]["queue"].append(queue)
        parts[name]["worker"].append(e2e - ingest - queue)
    return {
        name: {part: _quantiles(values) for part, values in by_part.items()}
        for name, by_part in parts.items()
    }


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_ms": None, "p99_ms": None}
    ordered = sorted(values)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"p50_ms": pick(0.5), "p99_ms": pick(0.99)}


def others_by_phase(
    others: Sequence[tuple[float, float, Sequence[tuple[str, float]]]],
    phases: Sequence[tuple[str, float, float]],
    origin_s: float,
    top: int = 5,
) -> dict[str, list[tuple[str, float]]]:
    """Per phase: the host's other busiest commands and the cores they used on average."""
    out: dict[str, list[tuple[str, float]]] = {}
    for name, start, end in phases:
        used: dict[str, float] = {}
        for t, _span, busiest in others:
            if start < t - origin_s <= end:
                for command, cpu_s in busiest:
                    used[command] = used.get(command, 0.0) + cpu_s
        ranked = sorted(used.items(), key=lambda x: -x[1])[:top]
        out[name] = [(command, round(cpu_s / (end - start), 3)) for command, cpu_s in ranked]
    return out


def _met(value: float | None, target: float, *, at_most: bool) -> bool | None:
    if value is None:
        return None
    return value <= target if at_most else value >= target


def targets(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Issue 10's live targets: measured, target, met."""
    att = report["slo_attainment"]
    handover = report.get("handover") or {}
    still = handover.get("still") or {}
    moved = handover.get("moved") or {}
    kills = handover.get("kills") or []
    answers = report.get("duplicates") or {}
    rows = [
        ("attainment during the step", att["step"]["attainment"], STEP_ATTAINMENT_TARGET, False),
        ("attainment after the step", att["after"]["attainment"], AFTER_ATTAINMENT_TARGET, False),
        (
            "longest pause of a partition that did not move, from the change's start (s)",
            still.get("longest_gap_since_change_s"),
            STILL_GAP_TARGET_S,
            True,
        ),
        (
            "longest wait on a moved partition, from the change's start (s)",
            moved.get("longest_gap_since_change_s"),
            MOVED_GAP_TARGET_S,
            True,
        ),
    ]
    # The same gaps whole, a stall begun before the change included: beside the targets,
    # against the same bounds, not targets themselves.
    whole = "whole stall, with any part before the change"
    reference = [
        (f"longest gap of a partition that did not move ({whole}, s)", still.get("longest_gap_s")),
        (f"longest gap of a moved partition ({whole}, s)", moved.get("longest_gap_s")),
    ]
    out = [
        {
            "measure": m,
            "value": v,
            "target": f"{'<=' if le else '>='} {t:g}",
            "met": _met(v, t, at_most=le),
        }
        for m, v, t, le in rows
    ]
    out.extend(
        {
            "measure": m,
            "value": v,
            "target": f"<= {t:g}",
            "met": _met(v, t, at_most=True),
            "reference": True,
        }
        for (m, v), t in zip(reference, (STILL_GAP_TARGET_S, MOVED_GAP_TARGET_S), strict=True)
    )
    for k in kills:
        out.append(
            {
                "measure": "killed worker's partitions served again (s after the kill)",
                "value": k["served_again_s"],
                "target": f"<= {k['bound_s']:g} (lease {k['lease_s']:g} + {KILL_MARGIN_S:g})",
                "met": k["within_bound"],
            }
        )
    for key, label in (
        ("lost", "lost"),
        ("answered_twice_after_dedupe", "answered twice after dedupe"),
    ):
        value = answers.get(key)
        out.append(
            {"measure": label, "value": value, "target": "0", "met": _met(value, 0, at_most=True)}
        )
    return out


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def handover_lines(report: Mapping[str, Any]) -> list[str]:
    """The printed summary of the handover, the kill, the answers and live vs sim."""
    lines: list[str] = []
    handover = report.get("handover")
    if handover:
        found = handover["changes"]
        kinds: dict[str, int] = {}
        for change in found:
            kinds[change["trigger"]] = kinds.get(change["trigger"], 0) + 1
        still, moved = handover["still"], handover["moved"]
        counts = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        lines.append(
            f"handover: {len(found)} membership changes ({counts}); "
            f"partitions that stayed: longest gap {_s(still['longest_gap_s'])} (partition "
            f"{still['partition']}, {still['trigger']} at t={still['at_change_t']}); moved: "
            f"{moved['count']}, longest gap {_s(moved['longest_gap_s'])}, median "
            f"{_s(moved['median_gap_s'])}; counted from each change's start: stayed "
            f"{_s(still.get('longest_gap_since_change_s'))}, moved "
            f"{_s(moved.get('longest_gap_since_change_s'))}; acquired by the new owner after "
            f"its trigger: "
            f"median {_s(moved['median_acquired_s'])}, most {_s(moved.get('max_acquired_s'))}"
        )
        outside = handover.get("outside_changes") or {}
        if outside.get("longest_gap_s") is not None:
            lines.append(
                f"for comparison, with no membership change under way: longest gap "
                f"{_s(outside['longest_gap_s'])} (partition {outside['partition']}, "
                f"t={outside['at_t']})"
            )
        for k in handover["kills"]:
            lines.append(
                f"kill: {k['instance']} (pid {k['pid']}, partitions {k['partitions']}) at "
                f"t={k['t']}: gone announced +{_s(k['gone_announced_s'])}, served again "
                f"+{_s(k['served_again_s'])} (bound {k['bound_s']:g} s: "
                f"{'met' if k['within_bound'] else 'MISSED'})"
            )
    answers = report.get("duplicates")
    if answers:
        lines.append(
            f"answers: lost {answers['lost']}, answered more than once "
            f"{answers['answered_more_than_once']} ({answers['repeat_records']} repeat records, "
            f"dropped by id), answered twice after dedupe {answers['answered_twice_after_dedupe']}"
        )
    unanswered = report.get("unanswered") or {}
    if unanswered.get("count"):
        lines.append(
            f"unanswered: {unanswered['count']}: a result in the reply log that the client "
            f"did not read for {len(unanswered['result_in_log_client_missed_it'])}, no result "
            f"in the log for {len(unanswered['no_result_in_log'])}"
        )
    for name, parts in (report.get("latency_breakdown") or {}).items():
        cpu = (report.get("cpu_cores_busy") or {}).get(name, {})
        cores = " ".join(f"{k} {v:.2f}" for k, v in cpu.items())
        lines.append(
            f"{name}: p50/p99 ms "
            + ", ".join(f"{k} {v['p50_ms']}/{v['p99_ms']}" for k, v in parts.items())
            + (f" | cores busy: {cores}" if cores else "")
        )
    sim = report.get("sim")
    if sim:
        rows = sim["side_by_side"]
        parts = [
            f"{k} live {_pct(v['live']) if 'attainment' in k else v['live']} sim "
            f"{_pct(v['sim']) if 'attainment' in k else v['sim']} (x{v['live_over_sim']})"
            for k, v in rows.items()
        ]
        lines.append("live vs sim: " + "; ".join(parts))
        if sim.get("assumed"):
            lines.append("sim assumed (not measured in this run): " + "; ".join(sim["assumed"]))
    for row in report.get("targets", []):
        if row.get("reference"):
            within = {True: "within", False: "over", None: "not measured"}[row["met"]]
            lines.append(
                f"reference {row['measure']}: {row['value']} ({within} {row['target']}; "
                "not a target)"
            )
            continue
        verdict = {True: "met", False: "MISSED", None: "not measured"}[row["met"]]
        lines.append(f"target {row['measure']}: {row['value']} (target {row['target']}) {verdict}")
    return lines
