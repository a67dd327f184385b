"""Proxmox hosts only: kernel cmdline, sysctls, swap, nvidia-uvm, LXC/KVM GPU passthrough.

pyinfra inventory/lab.py deploys/host.py

Other hosts of the site (serving guests, routers) are left alone, one line each.
"""

from pyinfra import host, inventory

from llmhost import interrupt
from llmhost.config.loading import load_proxmox_host
from llmhost.config.site import check_inventory
from llmhost.connection import no_delay
from llmhost.groups import check_one_role, is_proxmox_host, leave_alone
from llmhost.tasks.proxmox_host import proxmox_host

interrupt.install()
no_delay(host)  # ~6 ms a guest command instead of ~49 (llmhost/connection.py)
check_one_role(host)
if is_proxmox_host(host):
    cfg = load_proxmox_host(host)  # bad data stops at loading, before any operation
    check_inventory(inventory)  # as does data its guests contradict (llmhost/config/site.py)
    proxmox_host(cfg)
else:
    leave_alone(host, "host.py", "Proxmox host")
