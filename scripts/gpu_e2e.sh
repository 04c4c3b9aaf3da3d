#!/usr/bin/env bash
# End to end on a GPU host, in one go: MiniLM (seq 32) through broker, ingest and workers on
# the CUDA EP, with 1, 2 and 3 ingest instances and worker processes sharing the GPU, then the
# bus ceiling (null engine) with the same host's cores. nvidia-smi samples the GPU's busy share
# every 0.5 s during each run. One JSON per run and a summary line each land in OUT_DIR.
#
#   scripts/gpu_e2e.sh OUT_DIR MODELS_DIR       (MODELS_DIR holds minilm/; python3 on PATH with
#                                               the project importable, as after gpu-kit's run.sh)
set -u
OUT_DIR=${1:?OUT_DIR} MODELS=${2:?MODELS_DIR}
PY=${PY:-python3}
REQUESTS=${REQUESTS:-20000}
mkdir -p "$OUT_DIR"

run() { # name, then `bench throughput` arguments
    local name=$1 smi=""
    shift
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 500 \
            >"$OUT_DIR/$name.smi" 2>/dev/null &
        smi=$!
    fi
    echo "=== $name: $*"
    timeout 170 "$PY" -m services.cli.main bench throughput --json "$OUT_DIR/$name.json" "$@" 2>&1 |
        grep -v "answered" | tail -4
    [ -n "$smi" ] && kill "$smi" 2>/dev/null
    if [ -s "$OUT_DIR/$name.smi" ]; then
        awk '{s += $1; n++; if ($1 > 0) {b += $1; m++}} END {
            printf "GPU busy: mean %.0f %% over the run, %.0f %% over samples where busy\n",
            s / (n ? n : 1), b / (m ? m : 1)}' "$OUT_DIR/$name.smi"
    fi
}

for n in ${SIZES:-1 2 3}; do
    run "e2e_minilm_i${n}w${n}" --model minilm --models "$MODELS" --seq 32 \
        --requests "$REQUESTS" --window 1024 --ingest "$n" --workers "$n"
done
run "bus_ceiling_i3w2" --engine null --requests 40000 --window 1024 --ingest 3 --workers 2
