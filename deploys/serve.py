"""Serving guests only: GPU userspace, uv-managed vLLM, weights, units, then proof it serves.

pyinfra inventory/lab.py deploys/serve.py
pyinfra inventory/lab.py deploys/serve.py --data served_model=minimax-m2.5

Other hosts of the site (Proxmox hosts, routers) are left alone, one line each.
"""

from pyinfra import host, inventory

from llmhost import interrupt
from llmhost.config.loading import load_guest
from llmhost.config.site import check_inventory
from llmhost.connection import no_delay
from llmhost.groups import check_one_role, is_serving_guest, leave_alone
from llmhost.secrets import resolve_secrets
from llmhost.tasks.serving_guest import serving_guest

interrupt.install()  # Ctrl-C ends any wait within seconds, non-zero
no_delay(host)  # ~6 ms a guest command instead of ~49 (llmhost/connection.py)
check_one_role(host)
if is_serving_guest(host):
    cfg = load_guest(host)  # bad data stops here, before any operation
    check_inventory(inventory)  # as does data its host contradicts (llmhost/config/site.py)
    serving_guest(cfg, resolve_secrets(cfg))
else:
    leave_alone(host, "serve.py", "serving guest")
