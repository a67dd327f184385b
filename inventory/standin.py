"""A container standing in for a Proxmox host (make standin-up): deploys/host.py runs for real
against its files; what only Proxmox/NVIDIA can run is recorded by shims (llmhost/testbed/)."""

from llmhost.testbed.standin import load

_s = load()

proxmox_hosts = [
    (
        _s["ip"],
        {
            "ssh_user": "root",
            "ssh_key": _s["ssh_key"],
            "ssh_strict_host_key_checking": "no",
            "ssh_known_hosts_file": "/dev/null",
            # The captured H200 host runs driver 580.159.04; the reference site pins 590.48.01.
            "nvidia_driver_version": "580.159.04",
            "lxc_guests": [{"vmid": 201, "name": "llm-lxc"}],
            "kvm_guests": [{"vmid": 301, "name": "llm-vm", "pci_addresses": []}],
        },
    )
]
