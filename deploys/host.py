"""Proxmox hosts: kernel cmdline, sysctls, swap, nvidia-uvm, LXC/KVM GPU passthrough.

pyinfra inventory/lab.py deploys/host.py --limit proxmox_hosts
"""

from pyinfra import host

from llmhost.config.loading import load_proxmox_host
from llmhost.tasks.proxmox_host import proxmox_host

if "proxmox_hosts" in host.groups:
    cfg = load_proxmox_host(host)  # bad data stops here, before any operation
    proxmox_host(cfg)
