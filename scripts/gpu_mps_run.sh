#!/usr/bin/env bash
# On a GPU host set up by ../shared/gpu-kit (kit built into .gpukit, parts staged): MiniLM with
# 4 ingest x 4 workers sharing the GPU without CUDA MPS, then 3x3 and 4x4 with an MPS daemon,
# in one run (docs/benchmarks.md, "On an NVIDIA H200", run 3). Needs two steps added to the
# kit's copy of run.sh: e2e-scale (`bench throughput --model minilm --seq 32 --requests 60000
# --window 2048 --ingest 3 --workers 3`) and e2e-scale4 (80000, 4096, 4, 4).
set -u
R=/tmp/res
mkdir -p $R/plain $R/mps
PROJECT=$PWD RESULTS=$R/plain TOTAL_BUDGET=200 STEPS="setup ort export raw e2e-scale4" bash .gpukit/main/run.sh > $R/plain/run_stdout.txt 2>&1
if command -v nvidia-cuda-mps-control >/dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
    mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
    nvidia-cuda-mps-control -d && echo "MPS daemon started" | tee $R/mps/mps.txt
    PROJECT=$PWD RESULTS=$R/mps TOTAL_BUDGET=120 STEPS="e2e-scale e2e-scale4" bash .gpukit/main/run.sh > $R/mps/run_stdout.txt 2>&1
    echo "MPS server processes: $(pgrep -c nvidia-cuda-mps || true)" | tee -a $R/mps/mps.txt
    echo quit | nvidia-cuda-mps-control
    cat $CUDA_MPS_LOG_DIRECTORY/control.log 2>/dev/null | tail -5 >> $R/mps/mps.txt
else
    echo "no nvidia-cuda-mps-control on this host" | tee $R/mps/mps.txt
fi
tar czf $OUT/results.tgz -C $R .
grep -hE "SUMMARY|: rc=|ratio|GPU util" $R/plain/run_stdout.txt $R/mps/run_stdout.txt | cut -c1-500
cat $R/mps/mps.txt
