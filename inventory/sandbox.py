"""The embedded default, a site like inventory/lab.py on this machine (make sandbox-up,
make standin-up): a container standing in for the Proxmox host (also the router and the
monitoring host), and the serving guest; with `make fleet-up`, a second serving guest (a copy
of the first, on the other core) behind the same router, and a switch then rolls.

Its API key is a file the sandbox made (secrets are named in group_data, never held there).
"""

from llmhost.testbed import replica
from llmhost.testbed.sandbox import API_KEY_FILE, REPLICA_IP, load_state
from llmhost.testbed.standin import REPLICA_VMID
from llmhost.testbed.standin import load as load_standin

_guest = load_state()
_pve = load_standin()
_fleet = replica.exists()  # the second serving guest (make fleet-up)
# The stand-in's guests: the sandbox container is its LXC 201, the fleet's copy its LXC 202
# (its host step starts either when it finds it stopped).
_lxc_guests = [{"vmid": 201, "name": "llm-lxc"}]
if _fleet:
    _lxc_guests.append({"vmid": REPLICA_VMID, "name": "llm-lxc-2"})

proxmox_hosts = [
    (
        _pve["ip"],
        {
            "ssh_user": "root",
            "ssh_key": _pve["ssh_key"],
            "ssh_strict_host_key_checking": "no",
            "ssh_known_hosts_file": "/dev/null",
            # The captured H200 host runs driver 580.159.04; the reference site pins 590.48.01.
            "nvidia_driver_version": "580.159.04",
            "lxc_guests": _lxc_guests,
            "kvm_guests": [{"vmid": 301, "name": "llm-vm", "pci_addresses": []}],
            # Its packages (node exporter, Prometheus, vllm-router) come through the sandbox's
            # proxies, as the guest's do.
            "package_sources": {"apt_proxy": _guest.apt_proxy, "index_url": _guest.pypi_index},
            # Also the router: vllm-router in front of the sandbox guest, its health checked
            # every 2 s (a dead replica leaves routing within 4 s).
            "router": {
                "listen_address": _pve["ip"],
                "health_check_interval_s": 2,
                "worker_startup_timeout_s": 600,
                # A replica back from a drill rejoins 10 s after its circuit opened, not the
                # site's 60 (the fleet module waits that long for each one).
                "cb_open_s": 10,
            },
            # Also the monitoring host: short intervals, so that the drills take seconds.
            "monitoring": {
                "listen_address": _pve["ip"],
                "scrape_interval_s": 5,
                # Alerts fire only at an evaluation: each second, so that a drill's alert
                # fires within its `for:` plus one scrape and at most one second.
                "evaluation_interval_s": 1,
                "retention_time": "2d",
                "retention_size": "1GB",
                "alerts": {"replica_down_for_s": 15, "gpu_held_for_s": 10},
            },
            "metrics": {"gpu_interval_s": 5},
        },
    )
]

# Prometheus and Alertmanager on the stand-in (a site's default: its Proxmox host), and the
# router in front of the serving guest.
monitoring = [_pve["ip"]]
routers = [_pve["ip"]]

_serving = {
    "ssh_user": _guest.ssh_user,
    "ssh_key": _guest.ssh_key,
    "ssh_strict_host_key_checking": "no",
    "ssh_known_hosts_file": "/dev/null",
    # Package sources the sandbox serves on its bridge (no NAT: the only way out).
    "package_sources": {
        "index_url": _guest.pypi_index,
        "find_links": _guest.find_links,
        "apt_proxy": _guest.apt_proxy,
    },
    "secrets": {"api_key": {"file": str(API_KEY_FILE)}},
}

sandbox = [(_guest.ip, _serving)]
if _fleet:
    # A core per guest (llmhost/testbed/replica.py says why): the first's engine on core 0,
    # the second's on core 1, each front end beside its own engine.
    sandbox = [
        (_guest.ip, {**_serving, "frontend_cpus": None}),
        (REPLICA_IP, {**_serving, "cpu_threads_bind": "1", "frontend_cpus": None}),
    ]
