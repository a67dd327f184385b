"""The whole site in one command, in order: the Proxmox hosts, then the serving guests.

pyinfra inventory/lab.py deploys/site.py                                  # rebuild after a reboot
pyinfra inventory/lab.py deploys/site.py --data served_model=minimax-m2.5   # switch the model

Every Proxmox host is converged (kernel cmdline verified, uvm device nodes at boot,
passthrough majors from the live /proc/devices, a guest restarted only when its block
changed) before any guest step: pyinfra interleaves independent hosts, so a barrier that
every host passes joins them. Every host's data is validated before the first operation.
"""

from pyinfra import host

from llmhost import interrupt
from llmhost.config.loading import load_guest, load_proxmox_host
from llmhost.connection import no_delay
from llmhost.groups import check_one_role, is_proxmox_host, is_serving_guest, leave_alone
from llmhost.operations.order import barrier
from llmhost.secrets import resolve_secrets
from llmhost.tasks.proxmox_host import proxmox_host
from llmhost.tasks.serving_guest import serving_guest

interrupt.install()
no_delay(host)  # ~6 ms a guest command instead of ~49 (llmhost/connection.py)
check_one_role(host)
proxmox = load_proxmox_host(host) if is_proxmox_host(host) else None
guest = load_guest(host) if is_serving_guest(host) else None
secrets = resolve_secrets(guest) if guest else None  # all data judged before any operation

if proxmox:
    proxmox_host(proxmox)
barrier(name="Proxmox hosts done: serving guests next", what="site order")
if guest and secrets:
    serving_guest(guest, secrets)
if not (proxmox or guest):
    leave_alone(host, "site.py", "Proxmox host or serving guest")
