#!/usr/bin/env bash
# A/B pairs of `inferbus bench throughput`: a base revision (A, in a temporary git worktree)
# against this working tree (B), alternating B, A, B, A, ... so that the machine's drift
# (10-40 % within minutes on the project's 2-core machine) falls on both sides alike.
#
#   scripts/ab_throughput.sh REV PAIRS OUTDIR [bench throughput options...]
#   scripts/ab_throughput.sh 369c47f 3 /tmp/ab --model minilm --models /tmp/m --seq 32 --requests 3000
#
# Each run writes OUTDIR/{A,B}N.json (the bench's report) and its log; one line a run is
# printed: raw and e2e samples/s, and the CPU ms a request of the broker, ingest and the
# load generator at saturation. Run nothing else meanwhile.
set -euo pipefail
rev=$1 pairs=$2; shift 2
# Absolute: each run works in its own tree (a relative OUTDIR failed every A run).
mkdir -p "$1" && out=$(cd "$1" && pwd); shift
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$here/.venv/bin/python"
base=$(mktemp -d /tmp/inferbus-ab-XXXXXX)
git -C "$here" worktree add --detach "$base/tree" "$rev" >/dev/null
trap 'git -C "$here" worktree remove --force "$base/tree"; rm -rf "$base"' EXIT

for i in $(seq 1 "$pairs"); do
  for side in B A; do
    tree=$here; [ "$side" = A ] && tree=$base/tree
    report=$out/$side$i.json
    echo "[$(date +%H:%M:%S)] pair $i/$pairs side $side ($([ "$side" = A ] && echo "$rev" || echo "working tree"))" >&2
    (cd "$tree" && PYTHONPATH=$tree HF_HUB_OFFLINE=1 timeout 600 "$python" -m services.cli.main \
      bench throughput --json "$report" "$@" > "$out/$side$i.log" 2>&1) || { echo "run $side$i failed: $out/$side$i.log" >&2; continue; }
    "$python" - "$report" "$side$i" <<'PY'
import json, sys

report = json.load(open(sys.argv[1]))
saturation = report["saturation"]
ratio = "-" if report["ratio_e2e_over_raw"] is None else f"{report['ratio_e2e_over_raw']:.2f}"
cpu = saturation["cpu"]["cpu_ms_per_request"]
ingest = sum(v for k, v in cpu.items() if k.startswith("ingest-"))
print(
    f"{sys.argv[2]}: raw {report['raw_engine']['samples_per_s']:.0f} e2e "
    f"{saturation['samples_per_s']:.0f} samples/s (ratio {ratio}) | "
    f"CPU ms a request: broker {cpu['broker']:.2f} ingest {ingest:.2f} loadgen {cpu['loadgen']:.2f}",
    flush=True,
)
PY
  done
done
"$python" -m services.bench.ab "$out"   # OUTDIR/ab.json and ab.png: every pair, B ÷ A
