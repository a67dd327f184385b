#!/usr/bin/env bash
# Captures for the state document (deploys/report.py) on a real NVIDIA machine, through the
# device tool: exactly the commands the report's facts run, so the report's parsers are
# tested on real output (committed as tests/fixtures/h200-report/).
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version,pci.bus_id \
  --format=csv,noheader,nounits > "$OUT/gpu-inventory.csv" 2>&1
nvidia-smi topo -m > "$OUT/topo-m.txt" 2>&1
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits \
  > "$OUT/compute-apps.csv" 2>&1
LC_ALL=C lscpu > "$OUT/lscpu.txt" 2>&1
head -n 5 /proc/meminfo > "$OUT/meminfo.txt"
uname -r > "$OUT/uname-r.txt"
ls "$OUT"
