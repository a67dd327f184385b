"""An example real site: one Proxmox host, one LXC serving guest, one KVM serving guest.

Copy it, change the addresses and vmids, and keep site data in group_data/.
"""

proxmox_hosts = [
    ("pve1.lab.example", {"ssh_user": "root"}),
]

lxc_guests = [
    ("llm-lxc.lab.example", {"ssh_user": "root"}),  # vmid 201 on pve1
]

kvm_guests = [
    ("llm-vm.lab.example", {"ssh_user": "root"}),  # vmid 301 on pve1
]
