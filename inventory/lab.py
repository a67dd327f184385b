"""An example real site, the reference box: one Proxmox host (lxc-p2p, 8 GPUs) and one LXC
guest serving Kimi-K2.5 on all 8 (group_data/ holds their data).

Copy it, change the addresses and vmids, and keep site data in group_data/. The host's
`lxc_guests` / `kvm_guests` must name its guests (by inventory name or first DNS label): a
deploy refuses a guest its host cannot give GPUs to (llmhost/config/site.py).

Under lxc-p2p the host's nvidia driver owns the GPUs and only LXC guests get them. To serve
from a KVM guest instead, the box is kvm-vfio (GPUs bound to vfio-pci) and the VM is passed
its GPUs by PCI address, one address a GPU, as many as its gpu_count:

    proxmox_hosts = [
        (
            "pve1.lab.example",
            {
                "ssh_user": "root",
                "host_profile": "kvm-vfio",
                "lxc_guests": [],
                "kvm_guests": [
                    {
                        "vmid": 301,
                        "name": "llm-vm",
                        "pci_addresses": [
                            "0000:01:00.0", "0000:21:00.0", "0000:41:00.0", "0000:61:00.0",
                            "0000:81:00.0", "0000:a1:00.0", "0000:c1:00.0", "0000:e1:00.0",
                        ],
                    }
                ],
            },
        ),
    ]
    kvm_guests = [("llm-vm.lab.example", {"ssh_user": "root"})]  # group_data/kvm_guests.py
"""

proxmox_hosts = [
    ("pve1.lab.example", {"ssh_user": "root"}),
]

lxc_guests = [
    ("llm-lxc.lab.example", {"ssh_user": "root"}),  # vmid 201 on pve1
]
