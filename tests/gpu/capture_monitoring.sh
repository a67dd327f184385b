#!/usr/bin/env bash
# Captures for the GPU textfile collector (llmhost/guest/gpu_metrics.py) on a real H200 (the
# `device` tool): its two nvidia-smi queries and its output, idle and with an orphaned worker
# holding 8 GiB (the zombie the GPU-held alert is for). Outputs land in $OUT; they are
# committed as tests/fixtures/h200-monitoring/. Run from the repo root.
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
GPU_Q=$(python3 -c "import sys; sys.path.insert(0, 'llmhost/guest'); import gpu_metrics as g; print(g.GPU_QUERY)")
APPS_Q=$(python3 -c "import sys; sys.path.insert(0, 'llmhost/guest'); import gpu_metrics as g; print(g.APPS_QUERY)")
capture() {  # $1: state name
  nvidia-smi --query-gpu="$GPU_Q" --format=csv,noheader,nounits > "$OUT/query-gpu-$1.csv"
  nvidia-smi --query-compute-apps="$APPS_Q" --format=csv,noheader,nounits > "$OUT/query-apps-$1.csv"
  python3 llmhost/guest/gpu_metrics.py --out "$OUT/llmhost_gpu-$1.prom"; echo "exit=$?" >> "$OUT/runs.txt"
  python3 llmhost/guest/gpu_metrics.py --attribute units --out "$OUT/llmhost_gpu-units-$1.prom"
  echo "exit=$?" >> "$OUT/runs.txt"
  for p in $(awk -F', ' 'NF>=2 {print $2}' "$OUT/query-apps-$1.csv"); do
    echo "$p $(cat /proc/$p/cgroup 2>/dev/null | tr '\n' ' ')" >> "$OUT/cgroups-$1.txt"; done
}
capture idle
python3 tests/gpu/orphan_worker.py --gib 8 --vllm-name > "$OUT/worker.log" 2>&1 &
parent=$!
for i in $(seq 1 120); do grep -q "worker ready" "$OUT/worker.log" && break; sleep 0.5; done
child=$(awk '/^child/{print $2}' "$OUT/worker.log")
kill -KILL "$parent"; sleep 2
capture held
kill -KILL "$child" 2>/dev/null; wait 2>/dev/null; sleep 2
capture after
nvidia-smi --version > "$OUT/nvidia-smi-version.txt" 2>&1 || true
cat "$OUT"/runs.txt; grep -h held_without "$OUT"/llmhost_gpu-*.prom; cat "$OUT"/cgroups-*.txt
rm -f "$OUT"/worker.log; mkdir -p /tmp/cap && mv "$OUT"/* /tmp/cap/ && tar czf "$OUT/monitoring-captures.tgz" -C /tmp/cap .
