"""The whole site in one command, in order: the Proxmox hosts, then the serving guests, then
the routers and the monitoring host (when the inventory has them; with a monitoring host,
node exporter goes on every host).

llmhost site inventory/lab.py                                   # rebuild after a reboot
pyinfra inventory/lab.py deploys/site.py --data served_model=minimax-m2.5   # switch the model

After a reboot, use `llmhost site` (llmhost/site_run.py): pyinfra connects to every host when
a run starts, so a guest still down would fail at connect before its Proxmox host starts it;
`llmhost site` runs the hosts first, waits for the guests' ssh, then runs this file.

Every Proxmox host is converged (kernel cmdline verified, uvm device nodes at boot,
passthrough majors from the live /proc/devices, a guest restarted only when its block
changed) before any guest step: pyinfra interleaves independent hosts, so a barrier that
every host passes joins them. Every host's data is validated before the first operation.
"""

from pyinfra import host, inventory

from llmhost import interrupt
from llmhost.config.loading import (
    load_exporter,
    load_guest,
    load_monitoring,
    load_proxmox_host,
    load_router,
)
from llmhost.config.site import check_inventory
from llmhost.connection import no_delay
from llmhost.groups import (
    check_one_role,
    is_monitoring_host,
    is_proxmox_host,
    is_router_host,
    is_serving_guest,
    leave_alone,
    scrape_address,
    site_is_monitored,
)
from llmhost.operations.order import barrier
from llmhost.secrets import resolve_secrets
from llmhost.tasks.monitoring import gpu_attribution, node_exporter, prometheus, site_hosts
from llmhost.tasks.proxmox_host import proxmox_host
from llmhost.tasks.router import router_workers, taken_ports, vllm_router
from llmhost.tasks.serving_guest import checked_guest, serving_guest

interrupt.install()
no_delay(host)  # ~6 ms a guest command instead of ~49 (llmhost/connection.py)
check_one_role(host)
proxmox = load_proxmox_host(host) if is_proxmox_host(host) else None
guest = load_guest(host) if is_serving_guest(host) else None
secrets = resolve_secrets(guest) if guest else None  # all data judged before any operation
monitor = load_monitoring(host) if is_monitoring_host(host) else None
router = load_router(host) if is_router_host(host) else None
scraped = (proxmox or guest or monitor or router) and site_is_monitored(inventory)
exporter = load_exporter(host) if scraped else None
check_inventory(inventory)  # the Proxmox hosts and their guests agree (llmhost/config/site.py)
watched = site_hosts(inventory) if monitor else []
workers = router_workers(router, inventory, taken_ports(guest, monitor, exporter)) if router else []

if proxmox:
    proxmox_host(proxmox)
barrier(name="Proxmox hosts done: serving guests next", what="site order")
# A guest whose live state refuses it (a foreign server on its port, say) gets one failing
# operation before any other; the site's other hosts go on (llmhost/operations/refused.py).
live = checked_guest(guest) if guest is not None else None
refused = live is not None and live.refused is not None
if exporter and not refused:
    node_exporter(exporter, scrape_address(host), gpus=gpu_attribution(proxmox, guest))
if guest and secrets and not refused:
    serving_guest(guest, secrets, node_exporter=exporter is not None, live=live)
barrier(name="serving guests done: routers and monitoring next", what="site order")
if router:
    vllm_router(router, workers)
if monitor:
    prometheus(monitor, watched)
if not (proxmox or guest or monitor or router):
    leave_alone(host, "site.py", "Proxmox host, serving guest, router or monitoring host")
