#!/usr/bin/env bash
# Host-fact captures on a real NVIDIA machine (the `device` tool) for the parser tests and
# the Proxmox stand-in: what /proc/cmdline, the driver, the modules and the device nodes
# look like on a running GPU host. Outputs land in $OUT (committed as tests/fixtures/h200/).
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
cat /proc/cmdline > "$OUT/proc-cmdline.txt"
cat /proc/devices > "$OUT/proc-devices.txt"
cat /proc/driver/nvidia/version > "$OUT/proc-driver-nvidia-version.txt"
nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,memory.total --format=csv \
  > "$OUT/query-gpu-driver.csv" 2>&1
(lsmod | awk 'NR==1 || /nvidia|vfio/') > "$OUT/lsmod-nvidia.txt" 2>&1
ls -1 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.* /usr/lib64/libnvidia-ml.so.* \
  > "$OUT/libnvidia-ml-ls.txt" 2>/dev/null
for p in /sys/module/nvidia_uvm/parameters/uvm_disable_hmm; do
  [ -r "$p" ] && echo "$p=$(cat "$p")"; done > "$OUT/nvidia-uvm-params.txt" 2>&1
(find /dev -maxdepth 2 -name 'nvidia*' -type c | sort) > "$OUT/dev-nvidia-nodes.txt"
(systemd-detect-virt 2>&1; systemd-detect-virt -c 2>&1) > "$OUT/virt.txt"
cat /proc/swaps > "$OUT/proc-swaps.txt"
for k in vm.swappiness kernel.numa_balancing vm.max_map_count; do
  echo "$k = $(sysctl -n $k 2>&1)"; done > "$OUT/sysctls.txt"
ls "$OUT"
