#!/usr/bin/env bash
# The zombie-GPU drill on a real NVIDIA GPU (the `device` tool), with llmhost's own cleanup code.
# Outputs land in $OUT; they are committed as tests/fixtures/h200-llmhost/ and
# docs/evidence/gpu-cleanup-*.json. Run from the repo root.
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
q() { nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits; }
drill() {  # $1: name, $2: extra orphan_worker args, $3: gpu_free args
  local name=$1
  q > "$OUT/$name-memused-before.csv"
  python3 tests/gpu/orphan_worker.py --gib 8 $2 > "$OUT/$name-worker.log" 2>&1 &
  local parent=$!
  for i in $(seq 1 120); do grep -q "worker ready" "$OUT/$name-worker.log" && break; sleep 0.5; done
  local child; child=$(awk '/^child/{print $2}' "$OUT/$name-worker.log")
  kill -KILL "$parent"; sleep 1
  ps -o pid,ppid,user,comm,args -p "$child" > "$OUT/$name-ps-orphan.txt"
  fuser /dev/nvidia* > "$OUT/$name-fuser-held.txt" 2>&1
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits \
    > "$OUT/$name-compute-apps-held.csv"
  q > "$OUT/$name-memused-held.csv"
  local t0=$EPOCHREALTIME
  python3 llmhost/guest/gpu_free.py $3 --json > "$OUT/$name-gpu-free.log" 2>&1
  local rc=$?
  echo "exit=$rc seconds=$(python3 -c "print(round($EPOCHREALTIME - $t0, 2))")" >> "$OUT/$name-gpu-free.log"
  q > "$OUT/$name-memused-after.csv"
  fuser /dev/nvidia* > "$OUT/$name-fuser-after.txt" 2>&1
  kill -KILL "$child" 2>/dev/null; wait 2>/dev/null
}
nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv > "$OUT/gpu.csv"
# 1: a vLLM-named orphan is in scope: found through fuser, killed, memory back to baseline.
drill vllm "--vllm-name" "--user vllm --threshold-mib 1024 --timeout 30"
# 2: a holder that is not vLLM's is left alone without --force (exit 2)...
drill foreign "" "--user vllm --threshold-mib 1024 --timeout 5"
# 3: ...and killed with --force.
drill force "" "--user vllm --force --threshold-mib 1024 --timeout 30"
tail -n 3 "$OUT"/*-gpu-free.log
mkdir -p /tmp/drill && mv "$OUT"/* /tmp/drill/ && tar czf "$OUT/gpu-drill.tgz" -C /tmp/drill .
